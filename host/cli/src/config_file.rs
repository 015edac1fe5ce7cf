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

use anyhow::{Context as _, bail};

/// Expand `--config-file` in `args` (the process's arguments) into flags.
pub fn expand(args: Vec<String>) -> anyhow::Result<Vec<String>> {
    let Some(sub) = args.iter().position(|a| a == "rollout" || a == "serve") else {
        return Ok(args);
    };
    let mut path = None;
    for (i, a) in args.iter().enumerate().skip(sub + 1) {
        if a == "--config-file" {
            path = args.get(i + 1).cloned();
        } else if let Some(p) = a.strip_prefix("--config-file=") {
            path = Some(p.to_string());
        }
    }
    let Some(path) = path else {
        return Ok(args);
    };
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading --config-file {path}"))?;
    let table: toml::Table =
        toml::from_str(&text).with_context(|| format!("parsing --config-file {path} as TOML"))?;
    let mut flags = Vec::new();
    for (key, value) in &table {
        match (key.as_str(), value) {
            ("workflow_config" | "workflow-config", v) => {
                flags.push("--config".to_string());
                flags.push(serde_json::to_string(v)?);
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
    let mut out = args[..=sub].to_vec();
    out.extend(flags);
    out.extend(args[sub + 1..].iter().cloned());
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
        toml::Value::String(s) => {
            flags.push(flag);
            flags.push(s.clone());
        }
        toml::Value::Integer(n) => {
            flags.push(flag);
            flags.push(n.to_string());
        }
        toml::Value::Float(x) => {
            flags.push(flag);
            flags.push(x.to_string());
        }
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
            "n_samples = 3\nnormalize = true\nreward = [\"a=x.wasm\", \"b=y.wasm\"]\n[workflow_config]\nreward = \"math\"\n[limits]\nmax_memory = \"1GiB\"\n",
        )
        .expect("write");
        let args: Vec<String> = [
            "rollbox",
            "rollout",
            "d.jsonl",
            "--config-file",
            path.to_str().expect("utf8"),
            "--n-samples",
            "5",
        ]
        .map(String::from)
        .to_vec();
        let out = expand(args).expect("expand");
        let joined = out.join(" ");
        let file_n = out.iter().position(|a| a == "3").expect("file value");
        let cli_n = out.iter().position(|a| a == "5").expect("cli value");
        assert!(file_n < cli_n, "{joined}");
        assert!(
            joined.contains("--reward a=x.wasm --reward b=y.wasm"),
            "{joined}"
        );
        assert!(joined.contains("--normalize"), "{joined}");
        assert!(joined.contains("--max-memory 1GiB"), "{joined}");
        assert!(joined.contains(r#"--config {"reward":"math"}"#), "{joined}");
        std::fs::write(&path, "config = \"x\"\n").expect("write");
        let bad = [
            "rollbox",
            "serve",
            "--config-file",
            path.to_str().expect("utf8"),
        ]
        .map(String::from)
        .to_vec();
        assert!(
            expand(bad)
                .expect_err("config")
                .to_string()
                .contains("[workflow_config]")
        );
    }
}
