use super::*;

/// The heap merge gives the simple loop's result on long words of a random merge table
/// (many equal-rank overlaps: words over three letters).
#[test]
fn long_pieces_merge_like_the_simple_loop() {
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |m: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % m as u64) as usize
    };
    let chars = byte_to_char();
    let mut tokens: Vec<String> = chars.iter().map(|c| c.to_string()).collect();
    let mut symbols = vec!["a".to_string(), "b".to_string(), "c".to_string()];
    let mut merges = Vec::new();
    while merges.len() < 60 {
        let (x, y) = (
            symbols[next(symbols.len())].clone(),
            symbols[next(symbols.len())].clone(),
        );
        let joined = format!("{x}{y}");
        if x.len() + y.len() > 12 || tokens.contains(&joined) {
            continue;
        }
        merges.push(format!("{x} {y}"));
        tokens.push(joined.clone());
        symbols.push(joined);
    }
    let bpe = ByteLevelBpe::new(&tokens, &merges, Vec::new()).expect("bpe");
    for len in [LONG_PIECE + 1, 64, 200, 1000, 5000] {
        for _ in 0..20 {
            let word: String = (0..len).map(|_| ['a', 'b', 'c'][next(3)]).collect();
            let ids: Vec<u32> = word
                .bytes()
                .map(|b| bpe.byte_ids[b as usize].expect("byte"))
                .collect();
            let (mut short, mut long) = (ids.clone(), ids);
            bpe.merge_short(&mut short);
            bpe.merge_long(&mut long);
            assert_eq!(short, long, "{word}");
        }
    }
    // One letter repeated, the issue's case: fast and the same.
    let ids = vec![bpe.byte_ids[b'a' as usize].expect("a"); 100_000];
    let start = std::time::Instant::now();
    let mut long = ids.clone();
    bpe.merge_long(&mut long);
    assert!(
        // Quadratic merging of 100,000 letters takes minutes; linear, milliseconds. The
        // bound leaves room for any load (issue 52).
        start.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    let mut short = ids[..4000].to_vec();
    bpe.merge_short(&mut short);
    let mut long4k = ids[..4000].to_vec();
    bpe.merge_long(&mut long4k);
    assert_eq!(short, long4k);
}

/// The regex alone, as [`split`] worked before its ASCII path.
fn split_with_regex(regex: &Regex, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let find = |pos: usize| regex.find_at(text, pos).map(|m| (m.start(), m.end()));
    split_with(text, find, |p| out.push(p.to_string()));
    out
}

#[test]
fn ascii_path_splits_like_the_regex() {
    let regex = Regex::new(GPT2_PATTERN).expect("pattern");
    // Every pair and triple of these, plus longer mixes.
    let atoms = [
        "a", "Z", "1", "09", " ", "  ", "\t", "\n", "\r\n", "\x0b", "\x0c", "\x1c", "\x7f", "\0",
        "'", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'x", "'S", "'r", "'l", "-", "!?", "_",
        "é", "\u{a0}", "\u{85}", "\u{2003}", "中", "²", "😀",
    ];
    let mut texts = Vec::new();
    for a in atoms {
        for b in atoms {
            texts.push(format!("{a}{b}"));
            for c in atoms {
                texts.push(format!("{a}{b}{c}"));
            }
        }
    }
    texts.push("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many clips did Natalia sell altogether in April and May?".into());
    texts.push("  leading  and trailing   \n\n  spaces\t\there's it's we'll they've I'd ".into());
    for text in &texts {
        let mut fast = Vec::new();
        split(&regex, text, |p| fast.push(p.to_string()));
        assert_eq!(fast, split_with_regex(&regex, text), "{text:?}");
    }
}
