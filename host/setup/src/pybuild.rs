//! Plain Python functions as components: `rollbox build reward|tool FILE.py[:FUNCTION]`, and a
//! `.py` path wherever a reward or tool is registered (built on first use into the cache).
//!
//! A build puts the user's file, unchanged, next to a wrapper (`guest-sdk/python/rollbox_wrap`,
//! built into rollbox) that implements the `reward` or `tool` world around the function, and
//! runs componentize-py over them with `--stub-wasi` (the component imports nothing but
//! rollbox's own interfaces). What goes in:
//!
//! * the file and what it imports from its own folder (modules, and packages whole), found by
//!   reading the source with Python's `ast` on the host ([`ANALYZE`]): the file is never run on
//!   the host, only inside componentize-py's pre-initialisation;
//! * its pure-Python dependencies: `--requirements`, else the third-party modules it imports
//!   (outside `try` blocks), resolved by pip from `py3-none-any` wheels only for componentize-py's
//!   CPython, and pinned with their sha256 in a lock. A dependency without such a wheel (native
//!   code) is refused at build, naming it: the sandbox has no native libraries;
//! * the dependencies are installed once per lock into the cache (`python-deps/`), and the first
//!   build over them is made twice: the first writes the `.pyc` files componentize-py's CPython
//!   uses, which keeps the import-time garbage out of the snapshot (a third smaller).
//!
//! Cached builds ([`PyBuild::cached`]) live in `python-builds/<key>/` of the cache folder, `key`
//! the sha256 of rollbox's version, the wrapper and WIT built in, the options and the file; the
//! entry's manifest records its local imports' sha256, checked on each use, and the lock. The
//! folder is owner-only; a build holds an exclusive `flock` on `<key>.lock` (opened without
//! following links), so concurrent first uses build once and a crashed build leaves no stale
//! lock.
//!
//! Both folders are bounded ([`trim`]): after a new build (or a new dependency folder), the
//! least recently used entries (a build's manifest and a dependency folder are touched on each
//! use) go until at most [`MAX_BUILDS`] builds of [`MAX_BUILDS_BYTES`] in all, and
//! [`MAX_DEPS`] dependency folders, are left. An entry used within [`KEEP_RECENT`] or locked by
//! a build in progress is never removed: another process may be loading it.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};
use sha2::{Digest as _, Sha256};

use crate::sdk;

/// Builds `python-builds/` keeps at most, and their bytes in all.
pub const MAX_BUILDS: usize = 64;
pub const MAX_BUILDS_BYTES: u64 = 4 << 30;
/// Dependency folders `python-deps/` keeps at most.
pub const MAX_DEPS: usize = 16;
/// An entry used this recently is kept whatever the bounds.
pub const KEEP_RECENT: std::time::Duration = std::time::Duration::from_secs(3600);

/// The componentize-py release rollbox builds Python components with.
pub const COMPONENTIZE_PY: &str = "0.25.1";
/// The CPython inside that componentize-py: dependencies are resolved for it.
pub const GUEST_PYTHON: &str = "3.14";
/// The trainers' reward shapes `rollbox build reward --style` takes.
pub const STYLES: &[&str] = &["verl", "trl", "areal", "openrlhf"];

/// The host-side reader of a file's imports (`ast` only).
const ANALYZE: &str = include_str!("pybuild/analyze.py");
/// The app module name in the staged folder.
const APP: &str = "rollbox_app";

/// Which world the function becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `reward`: `score` calls the function in its trainer's shape.
    Reward,
    /// `tool`: `describe` gives the schema from its signature, `call` calls it.
    Tool,
}

impl Kind {
    /// The WIT world.
    pub fn world(self) -> &'static str {
        match self {
            Kind::Reward => "reward",
            Kind::Tool => "tool",
        }
    }

    /// The kind of a registration's world name (`reward`, `tool`).
    pub fn of(world: &str) -> Option<Kind> {
        match world {
            "reward" => Some(Kind::Reward),
            "tool" => Some(Kind::Tool),
            _ => None,
        }
    }
}

/// A Python file to build into a component, and how.
#[derive(Debug, Clone)]
pub struct PyBuild {
    /// Reward or tool.
    pub kind: Kind,
    /// The `.py` file.
    pub file: PathBuf,
    /// The function to wrap; `None`: the kind's usual name (`compute_score`, `reward_func`,
    /// `reward_fn`), else the file's only public function.
    pub function: Option<String>,
    /// A reward's trainer shape (one of [`STYLES`]); `None`: told from its parameters.
    pub style: Option<String>,
    /// A requirements file; `None`: the file's third-party imports.
    pub requirements: Option<PathBuf>,
    /// Modules to import at build besides the file's own imports (ones it imports lazily).
    pub preimport: Vec<String>,
    /// Score sample answers once at build (a reward), so what the function caches on first
    /// use is in the snapshot; results are thrown away.
    pub warm_up: bool,
}

/// What a build made.
#[derive(Debug, Clone)]
pub struct Built {
    /// The component.
    pub wasm: PathBuf,
    /// The function wrapped.
    pub function: String,
    /// The pinned dependencies (`name==version --hash=sha256:...` lines; empty: none).
    pub lock: String,
    /// The local files bundled beside the file, relative to its folder.
    pub local: Vec<String>,
}

impl PyBuild {
    /// `spec` as a Python file to build, when it is one: `FILE.py` or `FILE.py:FUNCTION`.
    pub fn from_spec(kind: Kind, spec: &Path) -> Option<PyBuild> {
        let text = spec.to_str()?;
        let (file, function) = match text.rsplit_once(':') {
            Some((file, f)) if file.ends_with(".py") => (file, Some(f.to_string())),
            _ if text.ends_with(".py") => (text, None),
            _ => return None,
        };
        Some(PyBuild {
            kind,
            file: PathBuf::from(file),
            function,
            style: None,
            requirements: None,
            preimport: Vec::new(),
            warm_up: true,
        })
    }

    fn check(&self) -> anyhow::Result<()> {
        if let Some(f) = &self.function
            && !is_identifier(f)
        {
            bail!("`{f}` is not a Python function name (FILE.py:FUNCTION)");
        }
        if let Some(s) = &self.style {
            if self.kind == Kind::Tool {
                bail!("a style applies to rewards; a tool takes its arguments as JSON keywords");
            }
            if !STYLES.contains(&s.as_str()) {
                bail!("unknown style `{s}`; use {}", STYLES.join(", "));
            }
        }
        for m in &self.preimport {
            if !m.split('.').all(is_identifier) {
                bail!("`{m}` is not a module name (--preimport)");
            }
        }
        let stem = self.module()?;
        if [
            "rollbox_app",
            "rollbox_wrap",
            "wit_world",
            "componentize_py_types",
        ]
        .contains(&stem.as_str())
        {
            bail!(
                "{}: `{stem}` is a name the wrapper uses; rename the file",
                self.file.display()
            );
        }
        Ok(())
    }

    /// The file's module name.
    fn module(&self) -> anyhow::Result<String> {
        let stem = self
            .file
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        if !is_identifier(stem) {
            bail!(
                "{}: `{stem}` is not a Python module name; rename the file (letters, digits, _)",
                self.file.display()
            );
        }
        Ok(stem.to_string())
    }

    /// Build the component into `out` (and, when `lock_out` is given, the lock beside it).
    pub fn build(&self, out: &Path, lock_out: Option<&Path>) -> anyhow::Result<Built> {
        self.check()?;
        let tools = Tools::find()?;
        let stage = TempDir::new(&std::env::temp_dir(), "rollbox-build")?;
        let built = self.build_in(&tools, stage.path(), out)?;
        if let Some(lock_path) = lock_out {
            write_file(lock_path, built.lock.as_bytes())?;
        }
        Ok(built)
    }

    /// The component built from this file, from the cache when its file, local imports and
    /// options are unchanged; else built now (once, however many processes ask at once).
    pub fn cached(&self) -> anyhow::Result<PathBuf> {
        self.check()?;
        let root = builds_dir()?;
        let key = self.key()?;
        let entry = root.join(&key);
        if let Some(wasm) = valid_entry(&entry, &self.folder())? {
            touch(&entry.join("manifest.json"));
            return Ok(wasm);
        }
        let _lock = Lock::take(&root.join(format!("{key}.lock")))?;
        if let Some(wasm) = valid_entry(&entry, &self.folder())? {
            return Ok(wasm); // another process built it while we waited
        }
        eprintln!(
            "building {} into a {} component (once; cached in {})",
            self.file.display(),
            self.kind.world(),
            root.display()
        );
        let tools = Tools::find()?;
        let work = TempDir::new(&root, &format!("{key}.tmp"))?;
        let stage = work.path().join("stage");
        std::fs::create_dir(&stage)?;
        let built_dir = work.path().join("entry");
        std::fs::create_dir(&built_dir)?;
        let built = self.build_in(&tools, &stage, &built_dir.join("component.wasm"))?;
        let folder = self.folder();
        let mut local = serde_json::Map::new();
        for rel in &built.local {
            local.insert(rel.clone(), sha256_file(&folder.join(rel))?.into());
        }
        let manifest = serde_json::json!({
            "file": self.file.display().to_string(),
            "function": built.function,
            "local": local,
            "lock": built.lock,
        });
        write_file(
            &built_dir.join("manifest.json"),
            manifest.to_string().as_bytes(),
        )?;
        if entry.exists() {
            std::fs::remove_dir_all(&entry)
                .with_context(|| format!("replacing {}", entry.display()))?;
        }
        std::fs::rename(&built_dir, &entry)
            .with_context(|| format!("moving the build to {}", entry.display()))?;
        if let Err(e) = trim(&root, &key, MAX_BUILDS, MAX_BUILDS_BYTES, KEEP_RECENT) {
            tracing::warn!("could not trim {}: {e:#}", root.display());
        }
        Ok(entry.join("component.wasm"))
    }

    fn folder(&self) -> PathBuf {
        match self.file.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    /// The cache key: rollbox's version, the wrapper and WIT it builds with, the options, the
    /// file and the requirements file.
    fn key(&self) -> anyhow::Result<String> {
        let mut h = Sha256::new();
        let mut field = |label: &str, bytes: &[u8]| {
            h.update(label.as_bytes());
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        field("rollbox", env!("CARGO_PKG_VERSION").as_bytes());
        field("componentize-py", COMPONENTIZE_PY.as_bytes());
        for (path, text) in sdk::FILES
            .iter()
            .filter(|(p, _)| p.starts_with("wit/") || p.starts_with("rollbox_wrap/"))
        {
            field(path, text.as_bytes());
        }
        field("kind", self.kind.world().as_bytes());
        field(
            "function",
            self.function.as_deref().unwrap_or_default().as_bytes(),
        );
        field(
            "style",
            self.style.as_deref().unwrap_or_default().as_bytes(),
        );
        field("preimport", self.preimport.join(",").as_bytes());
        field("warm-up", &[u8::from(self.warm_up)]);
        field("file", &read_source(&self.file)?);
        if let Some(r) = &self.requirements {
            field("requirements", &read_source(r)?);
        }
        Ok(hex::encode(h.finalize()))
    }

    /// Stage, resolve, componentize: `out` is the component.
    fn build_in(&self, tools: &Tools, stage: &Path, out: &Path) -> anyhow::Result<Built> {
        let analysis = tools.analyze(self)?;
        let module = self.module()?;
        let folder = self.folder();
        // The file and its local imports, unchanged, at their places relative to each other.
        std::fs::write(stage.join(format!("{module}.py")), read_source(&self.file)?)?;
        for rel in &analysis.local {
            let to = stage.join(rel);
            if let Some(p) = to.parent() {
                std::fs::create_dir_all(p)?;
            }
            std::fs::write(&to, read_source(&folder.join(rel))?)?;
        }
        // The wrapper and the WIT.
        for (path, text) in sdk::FILES
            .iter()
            .filter(|(p, _)| p.starts_with("wit/") || p.starts_with("rollbox_wrap/"))
        {
            let to = stage.join(path);
            std::fs::create_dir_all(to.parent().expect("a file in a folder"))?;
            std::fs::write(&to, text)?;
        }
        let mut preimport: Vec<String> = self.preimport.clone();
        preimport.extend(analysis.preimport.iter().cloned());
        let app = match self.kind {
            Kind::Reward => format!(
                "from rollbox_wrap.reward import world\nWitWorld = world({module:?}, {:?}, {}, {}, {})\n",
                analysis.function,
                py_str(self.style.as_deref()),
                py_list(&preimport),
                if self.warm_up { "True" } else { "False" },
            ),
            Kind::Tool => format!(
                "from rollbox_wrap.tool import world\nWitWorld = world({module:?}, {:?}, {})\n",
                analysis.function,
                py_list(&preimport),
            ),
        };
        std::fs::write(stage.join(format!("{APP}.py")), app)?;
        // Dependencies.
        let requirements = match &self.requirements {
            Some(r) => String::from_utf8(read_source(r)?)
                .with_context(|| format!("{} is not UTF-8", r.display()))?,
            None => analysis
                .third_party
                .iter()
                .map(|t| format!("{}\n", t.dist))
                .collect(),
        };
        let (lock, deps) = if requirements.lines().any(|l| {
            let l = l.trim();
            !l.is_empty() && !l.starts_with('#')
        }) {
            let lock = tools.resolve(stage, &requirements)?;
            let (deps, fresh) = tools.install(&lock)?;
            (lock, Some((deps, fresh)))
        } else {
            (String::new(), None)
        };
        if let Some((deps, true)) = &deps {
            // First build over fresh dependencies: it writes their .pyc files; its output is
            // thrown away.
            let prime = stage.join(".prime.wasm");
            tools.componentize(self.kind, stage, Some(deps), &prime)?;
            let _ = std::fs::remove_file(prime);
        }
        // componentize-py writes into the private stage, never at a predictable name beside
        // `out` (whose folder others may write to); `out` gets the bytes through a new file.
        let built = stage.join(".component.wasm");
        tools.componentize(
            self.kind,
            stage,
            deps.as_ref().map(|d| d.0.as_path()),
            &built,
        )?;
        let bytes =
            std::fs::read(&built).with_context(|| format!("reading {}", built.display()))?;
        write_file(out, &bytes)?;
        Ok(Built {
            wasm: out.to_path_buf(),
            function: analysis.function,
            lock,
            local: analysis.local,
        })
    }
}

/// The analysis `ANALYZE` prints.
#[derive(serde::Deserialize)]
struct Analysis {
    function: String,
    local: Vec<String>,
    third_party: Vec<ThirdParty>,
    preimport: Vec<String>,
}

#[derive(serde::Deserialize)]
struct ThirdParty {
    dist: String,
}

/// componentize-py and the Python whose pip resolves dependencies.
struct Tools {
    componentize: PathBuf,
    python: PathBuf,
}

const INSTALL: &str = "pip install 'rollbox[build]' (or componentize-py==0.25.1)";

impl Tools {
    /// componentize-py: `$COMPONENTIZE_PY`, else the one beside `$ROLLBOX_PYTHON` (its venv;
    /// the Python package sets it to its own interpreter), else on `PATH`, else beside this
    /// executable (the wheel's `rollbox` in a venv), at [`COMPONENTIZE_PY`]. The Python:
    /// `$ROLLBOX_PYTHON`, else the one beside componentize-py, else `python3` on `PATH`.
    fn find() -> anyhow::Result<Tools> {
        let python_env = std::env::var_os("ROLLBOX_PYTHON").map(PathBuf::from);
        let beside =
            |dir: Option<&Path>, name: &str| dir.map(|d| d.join(name)).filter(|p| p.is_file());
        let exe = std::env::current_exe().ok();
        let componentize = std::env::var_os("COMPONENTIZE_PY")
            .map(PathBuf::from)
            .or_else(|| beside(python_env.as_deref().and_then(Path::parent), "componentize-py"))
            .or_else(|| which("componentize-py"))
            .or_else(|| beside(exe.as_deref().and_then(Path::parent), "componentize-py"))
            .with_context(|| {
                format!("building a Python component needs componentize-py {COMPONENTIZE_PY} and pip: {INSTALL}")
            })?;
        let version = Command::new(&componentize)
            .arg("--version")
            .output()
            .with_context(|| format!("running {}", componentize.display()))?;
        let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
        if version != format!("componentize-py {COMPONENTIZE_PY}") {
            bail!(
                "{} is `{version}`; rollbox builds with componentize-py {COMPONENTIZE_PY}: {INSTALL}",
                componentize.display()
            );
        }
        let python = python_env
            .or_else(|| beside(componentize.parent(), "python3"))
            .or_else(|| which("python3"))
            .context("building a Python component needs a Python with pip (python3 on PATH, or ROLLBOX_PYTHON)")?;
        Ok(Tools {
            componentize,
            python,
        })
    }

    fn analyze(&self, b: &PyBuild) -> anyhow::Result<Analysis> {
        let out = Command::new(&self.python)
            .arg("-I")
            .arg("-c")
            .arg(ANALYZE)
            .arg(&b.file)
            .arg(b.kind.world())
            .arg(b.function.as_deref().unwrap_or_default())
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", self.python.display()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let v: serde_json::Value = serde_json::from_str(text.trim()).with_context(|| {
            format!(
                "reading {}'s imports failed: {}",
                b.file.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })?;
        if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
            bail!("{e}");
        }
        Ok(serde_json::from_value(v)?)
    }

    /// pip's `py3-none-any` resolution of `requirements` for [`GUEST_PYTHON`], as a lock.
    fn resolve(&self, stage: &Path, requirements: &str) -> anyhow::Result<String> {
        let req = stage.join(".requirements.in");
        std::fs::write(&req, requirements)?;
        let out = self
            .pip(&[
                "install",
                "--dry-run",
                "--ignore-installed",
                "--report",
                "-",
            ])
            .arg("--target")
            .arg(stage.join(".resolve"))
            .arg("-r")
            .arg(&req)
            .output()
            .with_context(|| format!("running {} -m pip", self.python.display()))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            if let Some(name) = err
                .split("satisfies the requirement ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
            {
                bail!(
                    "`{name}` has no pure-Python wheel (py3-none-any) for CPython {GUEST_PYTHON} on the index: either it has native code, which the sandbox cannot run (it has CPython's standard library only, without ctypes, ssl or sqlite3), or that version is published only as a source archive (then name a version with a wheel in --requirements). If the import is optional, keep it inside a `try` block. pip said: {}",
                    err.trim()
                );
            }
            bail!("resolving the dependencies with pip failed: {}", err.trim());
        }
        let report: serde_json::Value =
            serde_json::from_slice(&out.stdout).context("reading pip's installation report")?;
        let mut lines = Vec::new();
        for item in report["install"].as_array().into_iter().flatten() {
            let name = item["metadata"]["name"].as_str().unwrap_or_default();
            let version = item["metadata"]["version"].as_str().unwrap_or_default();
            let url = item["download_info"]["url"].as_str().unwrap_or_default();
            let file = url.rsplit('/').next().unwrap_or_default();
            if !file.ends_with("-none-any.whl") {
                bail!(
                    "`{name}` resolved to {file}, not a pure-Python wheel: the sandbox has no native code"
                );
            }
            let sha = item["download_info"]["archive_info"]["hashes"]["sha256"]
                .as_str()
                .with_context(|| format!("pip reported no sha256 for {file}"))?;
            lines.push(format!("{name}=={version} --hash=sha256:{sha}"));
        }
        lines.sort();
        Ok(lines.iter().map(|l| format!("{l}\n")).collect())
    }

    /// The folder with the lock's wheels installed (`python-deps/<hash>/`), and whether it was
    /// installed just now.
    fn install(&self, lock: &str) -> anyhow::Result<(PathBuf, bool)> {
        let root = cache_root()?.join("python-deps");
        private_dir(&root)?;
        let key = hex::encode(&Sha256::digest(format!("{COMPONENTIZE_PY}\n{lock}"))[..8]);
        let dir = root.join(&key);
        let _lock = Lock::take(&root.join(format!("{key}.lock")))?;
        if dir.join(".complete").is_file() {
            touch(&dir.join(".complete"));
            return Ok((dir, false));
        }
        let work = TempDir::new(&root, &format!("{key}.tmp"))?;
        let req = work.path().join("lock.txt");
        std::fs::write(&req, lock)?;
        let target = work.path().join("site");
        let out = self
            .pip(&["install", "--no-deps", "--require-hashes", "--no-compile"])
            .arg("--target")
            .arg(&target)
            .arg("-r")
            .arg(&req)
            .output()
            .with_context(|| format!("running {} -m pip", self.python.display()))?;
        if !out.status.success() {
            bail!(
                "installing the locked dependencies failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        for extra in ["bin", "share"] {
            let _ = std::fs::remove_dir_all(target.join(extra));
        }
        std::fs::write(target.join(".complete"), lock)?;
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::rename(&target, &dir)?;
        drop(_lock);
        if let Err(e) = trim(&root, &key, MAX_DEPS, u64::MAX, KEEP_RECENT) {
            tracing::warn!("could not trim {}: {e:#}", root.display());
        }
        Ok((dir, true))
    }

    /// `python -m pip ARGS` for pure wheels of [`GUEST_PYTHON`], quiet.
    fn pip(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.python);
        c.args(["-m", "pip"])
            .args(args)
            .args([
                "--quiet",
                "--disable-pip-version-check",
                "--only-binary=:all:",
                "--platform",
                "any",
                "--implementation",
                "py",
                "--abi",
                "none",
                "--python-version",
                GUEST_PYTHON,
            ])
            .stdin(Stdio::null());
        c
    }

    fn componentize(
        &self,
        kind: Kind,
        stage: &Path,
        deps: Option<&Path>,
        out: &Path,
    ) -> anyhow::Result<()> {
        let mut c = Command::new(&self.componentize);
        c.current_dir(stage)
            .args([
                "-d",
                "wit",
                "-w",
                kind.world(),
                "componentize",
                "--stub-wasi",
            ])
            .arg("-p")
            .arg(stage);
        if let Some(d) = deps {
            c.arg("-p").arg(d);
        }
        c.arg(APP)
            .arg("-o")
            .arg(out)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let result = run_bounded(c, BUILD_TIMEOUT)
            .with_context(|| format!("running {}", self.componentize.display()))?;
        let Some(result) = result else {
            let _ = std::fs::remove_file(out);
            bail!(
                "building did not finish in {} s: importing the file, or scoring the warm-up answers with it, never returned (a loop at import time?)",
                BUILD_TIMEOUT.as_secs()
            );
        };
        if !result.status.success() {
            let _ = std::fs::remove_file(out);
            bail!(
                "componentize-py could not build it; importing the file in the sandbox's CPython {GUEST_PYTHON} said:\n{}",
                python_error(&String::from_utf8_lossy(&result.stderr))
            );
        }
        Ok(())
    }
}

/// How long one componentize-py run may take: it imports the file and warms it up, so a file
/// that loops at import must not hang the build (a sympy-sized build takes ~40 s here).
const BUILD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// Run `c` to its end, or kill it after `limit` (`None`); its stderr is read meanwhile.
fn run_bounded(
    mut c: Command,
    limit: std::time::Duration,
) -> std::io::Result<Option<std::process::Output>> {
    let mut child = c.spawn()?;
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = (&mut stderr).take(1 << 20).read_to_end(&mut text);
        let _ = std::io::copy(&mut stderr, &mut std::io::sink());
        text
    });
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            let stderr = reader.join().unwrap_or_default();
            return Ok(Some(std::process::Output {
                status,
                stdout: Vec::new(),
                stderr,
            }));
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// componentize-py's failure without its Rust backtrace: the Python traceback and the cause.
fn python_error(stderr: &str) -> String {
    let mut lines: Vec<&str> = stderr
        .lines()
        .take_while(|l| !l.starts_with("Stack backtrace:"))
        .filter(|l| !l.trim().is_empty())
        .collect();
    if lines.len() > 60 {
        lines.drain(..lines.len() - 60);
    }
    lines.join("\n")
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn py_str(s: Option<&str>) -> String {
    s.map(|s| format!("{s:?}")).unwrap_or_else(|| "None".into())
}

fn py_list(items: &[String]) -> String {
    format!(
        "({})",
        items.iter().map(|s| format!("{s:?}, ")).collect::<String>()
    )
}

/// `name` on `PATH`.
fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// A user's source file (at most 64 MiB).
fn read_source(path: &Path) -> anyhow::Result<Vec<u8>> {
    const MAX: u64 = 64 << 20;
    let f = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut bytes = Vec::new();
    f.take(MAX + 1).read_to_end(&mut bytes)?;
    anyhow::ensure!(
        bytes.len() as u64 <= MAX,
        "{} is over {} MiB; a reward's sources are far smaller",
        path.display(),
        MAX >> 20
    );
    Ok(bytes)
}

fn sha256_file(path: &Path) -> anyhow::Result<String> {
    Ok(hex::encode(Sha256::digest(read_source(path)?)))
}

fn write_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let (mut f, tmp) = rollbox_tensor::create_temp_beside(path, Some(0o644))
        .with_context(|| format!("creating a file beside {}", path.display()))?;
    f.write_all(bytes)
        .and_then(|()| std::fs::rename(&tmp, path))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
        .with_context(|| format!("writing {}", path.display()))
}

/// The cache folder's root (`$ROLLBOX_CACHE_DIR`, else `$XDG_CACHE_HOME/rollbox`, else
/// `~/.cache/rollbox`).
fn cache_root() -> anyhow::Result<PathBuf> {
    rollbox_runtime::config::default_cache_dir()
        .and_then(|c| c.parent().map(Path::to_path_buf))
        .context("no cache folder: set ROLLBOX_CACHE_DIR (or HOME)")
}

fn builds_dir() -> anyhow::Result<PathBuf> {
    let d = cache_root()?.join("python-builds");
    private_dir(&d)?;
    Ok(d)
}

/// Create `dir` owner-only if missing; refuse one another user owns or can write to.
fn private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating {}", dir.display()))?;
    }
    let meta =
        std::fs::symlink_metadata(dir).with_context(|| format!("reading {}", dir.display()))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    anyhow::ensure!(
        meta.is_dir() && meta.uid() == me && meta.mode() & 0o022 == 0,
        "{} must be a folder of your own that others cannot write to (another user could replace the components built there); set ROLLBOX_CACHE_DIR to a private folder",
        dir.display()
    );
    Ok(())
}

/// The entry's component when its manifest's local files still have their sha256.
fn valid_entry(entry: &Path, folder: &Path) -> anyhow::Result<Option<PathBuf>> {
    let Ok(text) = std::fs::read_to_string(entry.join("manifest.json")) else {
        return Ok(None);
    };
    let Ok(manifest) = serde_json::from_str::<serde_json::Value>(&text) else {
        return Ok(None);
    };
    for (rel, sha) in manifest["local"].as_object().into_iter().flatten() {
        match sha256_file(&folder.join(rel)) {
            Ok(now) if Some(now.as_str()) == sha.as_str() => {}
            _ => return Ok(None),
        }
    }
    let wasm = entry.join("component.wasm");
    Ok(wasm.is_file().then_some(wasm))
}

/// Mark `file` used now (its modification time), for [`trim`].
fn touch(file: &Path) {
    if let Ok(f) = std::fs::File::options().write(true).open(file) {
        let _ = f.set_modified(std::time::SystemTime::now());
    }
}

/// When an entry of `root` was last used: its marker's modification time (a build's
/// `manifest.json`, a dependency folder's `.complete`), else the folder's own.
fn last_used(entry: &Path) -> std::time::SystemTime {
    ["manifest.json", ".complete"]
        .iter()
        .find_map(|m| std::fs::symlink_metadata(entry.join(m)).ok())
        .or_else(|| std::fs::symlink_metadata(entry).ok())
        .and_then(|m| m.modified().ok())
        .unwrap_or(std::time::UNIX_EPOCH)
}

/// Bytes of the regular files in `dir`, its subfolders included (links are not followed).
fn folder_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => folder_bytes(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}

/// Remove the least recently used entries (folders named by a hex key) of `root` but `keep`
/// until at most `max_entries` of `max_bytes` in all are left. An entry used within `recent`,
/// or whose lock another process holds (a build or install in progress), stays; an entry is
/// removed holding its lock, so no build or install of that key runs meanwhile.
fn trim(
    root: &Path,
    keep: &str,
    max_entries: usize,
    max_bytes: u64,
    recent: std::time::Duration,
) -> anyhow::Result<()> {
    let mut entries = Vec::new();
    for e in std::fs::read_dir(root).with_context(|| format!("listing {}", root.display()))? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name == keep
            || !name.bytes().all(|b| b.is_ascii_hexdigit())
            || !e.file_type().is_ok_and(|t| t.is_dir())
        {
            continue;
        }
        let path = e.path();
        entries.push((last_used(&path), folder_bytes(&path), name, path));
    }
    let mut bytes: u64 = folder_bytes(&root.join(keep)) + entries.iter().map(|e| e.1).sum::<u64>();
    let mut count = entries.len() + 1;
    entries.sort();
    let now = std::time::SystemTime::now();
    for (used, size, name, path) in entries {
        if count <= max_entries && bytes <= max_bytes {
            break;
        }
        if now.duration_since(used).unwrap_or_default() < recent {
            continue;
        }
        let Some(_lock) = Lock::try_take(&root.join(format!("{name}.lock")))? else {
            continue;
        };
        // Used since it was listed (its user touches it before loading it): kept.
        if now.duration_since(last_used(&path)).unwrap_or_default() < recent {
            continue;
        }
        std::fs::remove_dir_all(&path).with_context(|| format!("removing {}", path.display()))?;
        bytes -= size;
        count -= 1;
    }
    Ok(())
}

/// An exclusive `flock` on a lock file opened without following links; released on drop (and
/// by the kernel when the process dies, so no stale lock is left).
struct Lock {
    _file: std::fs::File,
}

impl Lock {
    fn take(path: &Path) -> anyhow::Result<Lock> {
        Ok(Lock::flock(path, true)?.expect("a blocking lock is taken"))
    }

    /// The lock if no other process holds it, else `None` at once.
    fn try_take(path: &Path) -> anyhow::Result<Option<Lock>> {
        Lock::flock(path, false)
    }

    fn flock(path: &Path, wait: bool) -> anyhow::Result<Option<Lock>> {
        use std::os::fd::AsRawFd as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .with_context(|| format!("opening the lock {}", path.display()))?;
        anyhow::ensure!(
            f.metadata()?.is_file(),
            "the lock {} is not a regular file",
            path.display()
        );
        let how = if wait {
            libc::LOCK_EX
        } else {
            libc::LOCK_EX | libc::LOCK_NB
        };
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(f.as_raw_fd(), how) } != 0 {
            let e = std::io::Error::last_os_error();
            if !wait && e.kind() == std::io::ErrorKind::WouldBlock {
                return Ok(None);
            }
            return Err(e).with_context(|| format!("locking {}", path.display()));
        }
        Ok(Some(Lock { _file: f }))
    }
}

/// A new owner-only folder under an unpredictable name, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(parent: &Path, prefix: &str) -> anyhow::Result<TempDir> {
        use std::os::unix::fs::DirBuilderExt as _;
        let mut random = [0u8; 8];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut r| r.read_exact(&mut random))
            .context("reading random bytes")?;
        let path = parent.join(format!("{prefix}-{}", hex::encode(random)));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        Ok(TempDir(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Past its bounds a cache folder loses its least recently used entries, but never the
    /// new one, one used within the keep-recent window, or one locked by another build.
    #[test]
    fn cache_folders_keep_within_their_bounds() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
        let entry = |name: &str, bytes: usize, used: std::time::SystemTime| {
            let d = root.join(name);
            std::fs::create_dir_all(d.join("site")).expect("mkdir");
            std::fs::write(d.join("site/blob"), vec![0u8; bytes]).expect("blob");
            std::fs::write(d.join("manifest.json"), "{}").expect("manifest");
            std::fs::File::options()
                .write(true)
                .open(d.join("manifest.json"))
                .expect("open")
                .set_modified(used)
                .expect("mtime");
        };
        let second = std::time::Duration::from_secs(1);
        entry("aa", 100, old);
        entry("bb", 100, old + second);
        entry("cc", 100, old + 2 * second);
        entry("dd", 100, std::time::SystemTime::now());
        entry("ee", 100, old + 3 * second);
        entry("ff", 100, old);
        std::fs::write(root.join("aa.lock"), "").expect("lock file");
        let held = Lock::take(&root.join("aa.lock")).expect("held by a build");
        // A name that is not a key, and a link, are never touched.
        std::fs::create_dir(root.join("not-a-key")).expect("mkdir");
        std::os::unix::fs::symlink(root.join("bb"), root.join("abab")).expect("symlink");
        trim(root, "ff", 3, u64::MAX, KEEP_RECENT).expect("trimmed");
        let mut left: Vec<String> = std::fs::read_dir(root)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| !n.ends_with(".lock"))
            .collect();
        left.sort();
        // aa is locked and dd recent: bb and cc (oldest) go, and ee too, to reach 3.
        assert_eq!(left, ["aa", "abab", "dd", "ff", "not-a-key"]);
        drop(held);
        // By bytes: ~100 bytes an entry, at most 250 in all: the locked aa goes now.
        trim(root, "ff", 10, 250, KEEP_RECENT).expect("trimmed");
        assert!(!root.join("aa").exists() && root.join("dd").exists() && root.join("ff").exists());
    }

    #[test]
    fn python_paths_and_functions() {
        let b = PyBuild::from_spec(Kind::Reward, Path::new("dir/my_reward.py:accuracy"))
            .expect("a Python path");
        assert_eq!(b.file, Path::new("dir/my_reward.py"));
        assert_eq!(b.function.as_deref(), Some("accuracy"));
        let b = PyBuild::from_spec(Kind::Tool, Path::new("t.py")).expect("a Python path");
        assert_eq!((b.file.as_path(), b.function), (Path::new("t.py"), None));
        assert!(PyBuild::from_spec(Kind::Reward, Path::new("math")).is_none());
        assert!(PyBuild::from_spec(Kind::Reward, Path::new("r.wasm")).is_none());
        assert!(PyBuild::from_spec(Kind::Reward, Path::new("C:x.py.wasm")).is_none());
    }

    #[test]
    fn bad_names_and_styles_are_refused_before_building() {
        let mut b =
            PyBuild::from_spec(Kind::Reward, Path::new("my-reward.py")).expect("a Python path");
        assert!(
            b.check()
                .expect_err("refused")
                .to_string()
                .contains("rename the file")
        );
        b.file = "ok.py".into();
        b.function = Some("not a name".into());
        assert!(
            b.check()
                .expect_err("refused")
                .to_string()
                .contains("not a Python function name")
        );
        b.function = None;
        b.style = Some("ray".into());
        let e = b.check().expect_err("refused").to_string();
        assert!(
            e.contains("unknown style `ray`") && e.contains("openrlhf"),
            "{e}"
        );
        b.file = "rollbox_wrap.py".into();
        b.style = None;
        assert!(
            b.check()
                .expect_err("refused")
                .to_string()
                .contains("a name the wrapper uses")
        );
    }
}
