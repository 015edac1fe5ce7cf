//! The crate's layout as lib.rs and the README state it, read from the sources: no module
//! imports one that imports it back (a file's imports are the modules its `crate::` paths name,
//! braces expanded, `crate::Name` through lib.rs's `pub use`, `super::x` in `host/`; unit-test
//! modules are not counted), and `Runtime` keeps to 15 public methods.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each module's imports of other modules of the crate.
type Graph = BTreeMap<String, BTreeSet<String>>;

fn sources(dir: &Path, prefix: &str, out: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).expect("src") {
        let path = entry.expect("entry").path();
        let stem = path
            .file_stem()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let module = if prefix.is_empty() {
            stem
        } else {
            format!("{prefix}::{stem}")
        };
        if path.is_dir() {
            sources(&path, &module, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("read");
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            let code: Vec<&str> = code
                .lines()
                .map(|l| l.split("//").next().unwrap_or_default())
                .collect();
            out.insert(module, code.join("\n"));
        }
    }
}

/// The paths after each `root`: `{a::X, b::{c, d}}` gives `a::X`, `b::c`, `b::d`.
fn paths(code: &str, root: &str) -> Vec<Vec<String>> {
    let (mut out, mut rest) = (Vec::new(), code);
    while let Some(i) = rest.find(root) {
        let before = rest[..i].chars().next_back();
        rest = &rest[i + root.len()..];
        if !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            expand(rest, Vec::new(), &mut out);
        }
    }
    out
}

fn expand(s: &str, mut path: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut s = s.trim_start();
    loop {
        if let Some(group) = s.strip_prefix('{') {
            let (mut depth, mut start) = (0usize, 0);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth > 0 => depth -= 1,
                    ',' | '}' if depth == 0 => {
                        expand(&group[start..i], path.clone(), out);
                        if c == '}' {
                            return;
                        }
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let end = s
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        if end == 0 {
            break;
        }
        path.push(s[..end].to_string());
        match s[end..].strip_prefix("::") {
            Some(r) => s = r.trim_start(),
            None => break,
        }
    }
    if !path.is_empty() {
        out.push(path);
    }
}

fn module_of(
    p: &[String],
    mods: &BTreeSet<String>,
    re: &BTreeMap<String, String>,
) -> Option<String> {
    (1..=p.len())
        .rev()
        .map(|n| p[..n].join("::"))
        .find(|m| mods.contains(m))
        .or_else(|| p.first().and_then(|n| re.get(n).cloned()))
}

fn graph() -> (BTreeMap<String, String>, Graph) {
    let mut files = BTreeMap::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        "",
        &mut files,
    );
    let mods: BTreeSet<String> = files.keys().cloned().collect();
    let mut re = BTreeMap::new();
    for p in paths(&files["lib"], "pub use ")
        .into_iter()
        .filter(|p| p.len() > 1)
    {
        if let Some(m) = module_of(&p[..p.len() - 1], &mods, &BTreeMap::new()) {
            re.insert(p[p.len() - 1].clone(), m);
        }
    }
    let mut g = Graph::new();
    for (m, code) in files.iter().filter(|(m, _)| *m != "lib") {
        let mut named = paths(code, "crate::");
        if let Some((parent, _)) = m.rsplit_once("::") {
            named.extend(paths(code, "super::").into_iter().map(|mut p| {
                p.insert(0, parent.into());
                p
            }));
        }
        let deps: BTreeSet<String> = named
            .iter()
            .filter_map(|p| module_of(p, &mods, &re))
            .filter(|d| d != m && d != "lib")
            .collect();
        g.insert(m.clone(), deps);
    }
    (files, g)
}

fn circle(g: &Graph) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        g: &Graph,
        on: &mut BTreeMap<String, bool>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match on.get(m) {
            Some(true) => {
                let at = stack.iter().position(|s| s == m)?;
                let mut c = stack[at..].to_vec();
                c.push(m.into());
                return Some(c);
            }
            Some(false) => return None,
            None => {}
        }
        on.insert(m.into(), true);
        stack.push(m.into());
        for d in g.get(m).into_iter().flatten() {
            if let Some(c) = visit(d, g, on, stack) {
                return Some(c);
            }
        }
        stack.pop();
        on.insert(m.into(), false);
        None
    }
    let mut on = BTreeMap::new();
    g.keys().find_map(|m| visit(m, g, &mut on, &mut Vec::new()))
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let (_, g) = graph();
    assert!(
        g.get("runtime").is_some_and(|d| d.contains("untrusted")),
        "imports are seen: {g:?}"
    );
    if let Some(c) = circle(&g) {
        panic!("import circle: {}", c.join(" -> "));
    }
}

#[test]
fn runtime_has_at_most_15_public_methods() {
    let (files, _) = graph();
    let n: usize = files
        .values()
        .flat_map(|code| {
            code.split("impl Runtime {")
                .skip(1)
                .chain(code.split("impl crate::Runtime {").skip(1))
                .map(|b| {
                    b.split("\n}\n")
                        .next()
                        .unwrap_or_default()
                        .lines()
                        .filter(|l| {
                            l.starts_with("    pub fn ") || l.starts_with("    pub async fn ")
                        })
                        .count()
                })
                .collect::<Vec<_>>()
        })
        .sum();
    assert!(n > 0, "no `impl Runtime` block was read");
    assert!(
        n <= 15,
        "Runtime has {n} public methods; keep it to 15: a new way in is a parameter (a `Scope`, a kind) of an existing one"
    );
}
