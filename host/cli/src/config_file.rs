//! `--config-file FILE.toml` for `rollout` and `serve`: every key is a flag's long name
//! (`n_samples` or `n-samples`), `workflow_config` is the workflow's `--config` object, and a
//! `[limits]` table holds the limit flags. The file's settings are inserted before the command
//! line's, and a flag given on the command line wins (clap's last-occurrence rule); list flags
//! (`reward = [...]`, `tool = [...]`) add to the file's.
//!
//! ```toml
//! engine = "embedded"
//! n_samples = 8
//! reward = ["math=target/wasm-guests/wasm32-wasip2/guest/rollbox_reward_math.wasm,timeout=15s"]
//!
//! [workflow_config]
//! reward = "math"
//! gconfig = { max_new_tokens = 256, temperature = 1.0 }
//!
//! [limits]
//! max_memory = "512MiB"
//! timeout = "600s"
//! ```

use std::ffi::OsString;
use std::path::Path;

use anyhow::{Context as _, bail};

/// `args` (the process's arguments, already parsed once: `args[1]` is the subcommand) with the
/// settings of the TOML file at `path` inserted right after the subcommand, so that the flags
/// given on the command line come later and win.
pub fn with_file(args: &[OsString], path: &Path) -> anyhow::Result<Vec<OsString>> {
    let shown = path.display();
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading --config-file {shown}"))?;
    let table: toml::Table =
        toml::from_str(&text).with_context(|| format!("parsing --config-file {shown} as TOML"))?;
    let path = shown.to_string();
    let mut flags = Vec::new();
    for (key, value) in &table {
        match (key.as_str(), value) {
            ("workflow_config" | "workflow-config", v) => {
                flags.push(format!("--config={}", serde_json::to_string(v)?));
            }
            ("limits", toml::Value::Table(t)) => {
                for (k, v) in t {
                    push(&mut flags, k, v, &path)?;
                }
            }
            ("config" | "config_file" | "config-file", _) => {
                bail!(
                    "{path}: `{key}` cannot be set in the file; use [workflow_config] for the workflow's configuration"
                )
            }
            (k, v) => push(&mut flags, k, v, &path)?,
        }
    }
    let split = args.len().min(2);
    let mut out = args[..split].to_vec();
    out.extend(flags.into_iter().map(OsString::from));
    out.extend(args[split..].iter().cloned());
    Ok(out)
}

fn push(flags: &mut Vec<String>, key: &str, v: &toml::Value, path: &str) -> anyhow::Result<()> {
    let flag = format!("--{}", key.replace('_', "-"));
    match v {
        toml::Value::Boolean(true) => flags.push(flag),
        toml::Value::Boolean(false) => {}
        toml::Value::Array(items) => {
            for item in items {
                push(flags, key, item, path)?;
            }
        }
        // `--flag=value`: a value that starts with `-`, or a flag with an optional value
        // (`--normalize=mean`), reads as meant.
        toml::Value::String(s) => flags.push(format!("{flag}={s}")),
        toml::Value::Integer(n) => flags.push(format!("{flag}={n}")),
        toml::Value::Float(x) => flags.push(format!("{flag}={x}")),
        other => {
            bail!("{path}: `{key}` = {other} is not a flag value (string, number, bool or list)")
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_goes_first_so_flags_win() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("r.toml");
        std::fs::write(
            &path,
            "n_samples = 3\nnormalize = \"mean\"\nreward = [\"a=x.wasm\", \"b=y.wasm\"]\n[workflow_config]\nreward = \"math\"\n[limits]\nmax_memory = \"1GiB\"\n",
        )
        .expect("write");
        let args: Vec<OsString> = ["rollbox", "rollout", "d.jsonl", "--n-samples", "5"]
            .map(OsString::from)
            .to_vec();
        let out: Vec<String> = with_file(&args, &path)
            .expect("expand")
            .into_iter()
            .map(|a| a.into_string().expect("utf8"))
            .collect();
        let joined = out.join(" ");
        assert!(joined.starts_with("rollbox rollout --"), "{joined}");
        let file_n = out
            .iter()
            .position(|a| a == "--n-samples=3")
            .expect("file value");
        let cli_n = out.iter().position(|a| a == "5").expect("cli value");
        assert!(file_n < cli_n, "{joined}");
        assert!(
            joined.contains("--reward=a=x.wasm --reward=b=y.wasm"),
            "{joined}"
        );
        assert!(joined.contains("--normalize=mean"), "{joined}");
        assert!(joined.contains("--max-memory=1GiB"), "{joined}");
        assert!(joined.contains(r#"--config={"reward":"math"}"#), "{joined}");
        std::fs::write(&path, "config = \"x\"\n").expect("write");
        let bad = ["rollbox", "serve"].map(OsString::from).to_vec();
        assert!(
            with_file(&bad, &path)
                .expect_err("config")
                .to_string()
                .contains("[workflow_config]")
        );
    }
}
