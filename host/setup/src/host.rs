//! [`Host`]: a built [`HostSpec`], the runtime with its engine, tokenizer, rewards and tools
//! registered and the workflow compiled, ready to run episodes and rollouts.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicI32;

use anyhow::Context as _;
use rollbox_engines::InferenceBackend;
use rollbox_rollout::{Rollout, RolloutOptions};
use rollbox_runtime::component::{ComponentInfo, ComponentSource};
use rollbox_runtime::{
    CallPolicy, Called, EnvSession, EnvironmentComponent, EpisodeReport, EpisodeRequest,
    HostMemory, Limits, RewardCall, RewardComponent, Runtime, RuntimeConfig, Scope, Services,
    ToolComponent, WorkflowComponent,
};
use rollbox_tokenizer::HostTokenizer;

use crate::builtin;
use crate::pybuild::{Kind, PyBuild};
use crate::spec::{ComponentSpec, HostSpec};

/// A reward or tool to register: its kind (`reward`, `tool`), name, spec and call policy.
struct Registration<'a> {
    kind: &'static str,
    name: &'a str,
    spec: &'a ComponentSpec,
    policy: CallPolicy,
}

/// The code reward's runner where none is given: the built-in python-exec.
static PYTHON_EXEC: std::sync::LazyLock<ComponentSpec> =
    std::sync::LazyLock::new(|| ComponentSpec::new("python-exec"));

/// The component `spec` names for a `kind` registration: a Python file built (or taken from
/// the cache of builds), else a path or a built-in's name.
fn source(kind: &'static str, spec: &ComponentSpec) -> anyhow::Result<ComponentSource> {
    if let Some(mut b) = Kind::of(kind).and_then(|k| PyBuild::from_spec(k, &spec.path)) {
        b.style = spec.style.clone();
        b.requirements = spec.requirements.clone();
        let wasm = b
            .cached()
            .with_context(|| format!("building {}", spec.path.display()))?;
        return Ok(ComponentSource::File(wasm));
    }
    anyhow::ensure!(
        spec.style.is_none() && spec.requirements.is_none(),
        "`style` and `requirements` apply to a Python file (FILE.py[:FUNCTION]); {} is not one",
        spec.path.display()
    );
    builtin::resolve(kind, &spec.path)
}

/// A workflow with its runtime, engine, tokenizer, rewards and tools, built from a
/// [`HostSpec`]. Cheap to share: [`Host::rollout`] and [`Host::run_episode`] take `&self`.
pub struct Host {
    components: Components,
    workflow: Arc<WorkflowComponent>,
    workflows: BTreeMap<String, Arc<WorkflowComponent>>,
    tokenizer: Option<Arc<HostTokenizer>>,
    config: serde_json::Value,
    limits: Arc<Limits>,
}

/// The rewards and tools of a [`HostSpec`] registered in a runtime, without a workflow
/// ([`HostSpec::build_components`]); every [`Host`] has one too ([`Host::components`]). Each
/// call runs in a fresh sandbox under the component's call policy, as a workflow's calls do.
pub struct Components {
    runtime: Arc<Runtime>,
    provenance: BTreeMap<String, String>,
    /// The environments by name, each with the limits its episodes run under.
    environments: BTreeMap<String, (Arc<EnvironmentComponent>, Arc<Limits>)>,
}

impl Components {
    /// Score with the reward registered as `name` (see [`Runtime::score`]).
    pub async fn score(&self, name: &str, call: RewardCall) -> anyhow::Result<Called<f64>> {
        self.runtime.score(&Scope::default(), name, call).await
    }

    /// Call the tool registered as `name` with its JSON arguments (see
    /// [`Runtime::call_tool`]).
    pub async fn call_tool(&self, name: &str, args: String) -> anyhow::Result<Called<String>> {
        self.runtime.call_tool(&Scope::default(), name, args).await
    }

    /// Open a session of the tool registered as `name`: one instance kept for any number of
    /// calls (see [`Runtime::open_session`]).
    pub async fn open_session(&self, name: &str) -> anyhow::Result<rollbox_runtime::ToolSession> {
        self.runtime
            .open_session::<rollbox_runtime::ToolSession>(&Scope::default(), name)
            .await
    }

    /// Open an episode of the environment named `name`: one instance for its `reset` and
    /// `step`s (see [`Runtime::open_session`]), its `tools` the registered ones.
    pub async fn open_environment(&self, name: &str) -> anyhow::Result<EnvSession> {
        let Some((env, limits)) = self.environments.get(name) else {
            let names: Vec<&str> = self.environments.keys().map(String::as_str).collect();
            anyhow::bail!(
                "no environment named `{name}` (environments: {})",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            );
        };
        let target = rollbox_runtime::EnvTarget {
            name,
            component: env,
            limits: limits.clone(),
        };
        self.runtime
            .open_session::<EnvSession>(&Scope::default(), target)
            .await
    }

    /// The environments' names.
    pub fn environment_names(&self) -> Vec<String> {
        self.environments.keys().cloned().collect()
    }

    /// The registered tools' OpenAI schemas, each from the tool's own `describe`, in name
    /// order: what workflows get from `tools.schemas`.
    pub async fn tool_schemas(&self) -> anyhow::Result<serde_json::Value> {
        self.runtime
            .tool_schemas(&Scope::default())
            .await
            .map_err(anyhow::Error::msg)
    }

    /// The registered rewards' names.
    pub fn reward_names(&self) -> Vec<String> {
        self.runtime.registries().reward_names()
    }

    /// The registered tools' names.
    pub fn tool_names(&self) -> Vec<String> {
        self.runtime.registries().tool_names()
    }

    /// rollbox's version and each component's sha256.
    pub fn provenance(&self) -> &BTreeMap<String, String> {
        &self.provenance
    }

    /// The runtime, for what this does not wrap.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }
}

impl HostSpec {
    /// When the engine is the embedded one with its default model and the file is not there,
    /// fetch it (`~/.cache/rollbox/models`; see [`crate::model`]).
    pub async fn ensure_model(&self) -> anyhow::Result<()> {
        match &self.engine {
            Some(engine) => crate::model::ensure_for(engine).await,
            None => Ok(()),
        }
    }

    /// Build the host: load the tokenizer and engine, start the runtime (with fuel metering
    /// when any limit sets fuel), register the rewards and tools and compile the workflow.
    pub fn build(&self) -> anyhow::Result<Host> {
        self.build_inner(None)
    }

    /// [`HostSpec::build`] with the embedder's own engine answering every generate call (a
    /// trainer's inference client); the spec must name no engine.
    pub fn build_with_engine(&self, engine: Arc<dyn InferenceBackend>) -> anyhow::Result<Host> {
        anyhow::ensure!(
            self.engine.is_none(),
            "the spec names the engine `{}` and an engine was also given; give one",
            self.engine
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default()
        );
        self.build_inner(Some(engine))
    }

    /// Build only the rewards and tools, registered in a runtime without a workflow, engine or
    /// tokenizer: what a trainer's reward function or tool calls (`rollbox.verl`,
    /// `rollbox.trl`, the OpenRLHF endpoint of `rollbox serve`). The spec's workflow, engine,
    /// tokenizer and config are not read.
    pub fn build_components(&self) -> anyhow::Result<Components> {
        let policies = self.policies()?;
        self.register(self.runtime(Services::new())?, policies)
    }

    fn build_inner(&self, engine: Option<Arc<dyn InferenceBackend>>) -> anyhow::Result<Host> {
        let limits = Arc::new(self.limits.apply(Limits::default()).context("limits")?);
        let policies = self.policies()?;
        let (services, tokenizer) = self.services(engine)?;
        let mut components = self.register(self.runtime(services)?, policies)?;
        if let Some(e) = &self.engine {
            components.provenance.insert("engine".into(), e.to_string());
        }
        let source = builtin::resolve("workflow", &self.workflow)?;
        let workflow = Arc::new(
            components
                .runtime
                .load::<WorkflowComponent>(&source)
                .with_context(|| format!("loading the workflow {}", self.workflow.display()))?,
        );
        components
            .provenance
            .insert("workflow_sha256".into(), workflow.info().sha256.clone());
        let mut workflows = BTreeMap::new();
        for (name, path) in &self.workflows {
            let source = builtin::resolve("workflow", path)?;
            let component = components
                .runtime
                .load::<WorkflowComponent>(&source)
                .with_context(|| format!("loading the workflow {name}={}", path.display()))?;
            workflows.insert(name.clone(), Arc::new(component));
        }
        Ok(Host {
            components,
            workflow,
            workflows,
            tokenizer,
            config: self.config.clone(),
            limits,
        })
    }

    /// The runtime over `services`, with fuel metering decided from the spec and, with
    /// `max_host_memory`, a memory budget of this host's own (without it, the process's default
    /// budget, shared by every host that sets none).
    fn runtime(&self, services: Services) -> anyhow::Result<Arc<Runtime>> {
        let services = match self.max_host_memory {
            Some(bytes) => services.with_host_memory(HostMemory::new(
                usize::try_from(bytes).unwrap_or(usize::MAX),
            )),
            None => services,
        };
        // Fuel metering is decided here, from every limit of the spec, so no entry point can
        // take a fuel limit and forget to meter it (the runtime also refuses a fuel limit it
        // cannot enforce).
        let defaults = RuntimeConfig::default();
        let runtime = Runtime::new(
            RuntimeConfig {
                fuel: self.wants_fuel(),
                max_instances: self.max_instances.unwrap_or(defaults.max_instances),
                ..defaults
            },
            services,
        )?;
        Ok(Arc::new(runtime))
    }

    /// Register the spec's rewards and tools in `runtime` with their call policies.
    fn register(
        &self,
        runtime: Arc<Runtime>,
        policies: Vec<Registration<'_>>,
    ) -> anyhow::Result<Components> {
        let mut provenance = BTreeMap::from([(
            "rollbox_version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        )]);
        for r in policies {
            let (kind, name, path, policy) = (r.kind, r.name, r.spec.path.as_path(), r.policy);
            let source = source(kind, r.spec)?;
            let registering = || format!("registering {kind} `{name}` ({})", path.display());
            let info = match kind {
                "reward" => runtime.register::<RewardComponent>(name, &source, policy),
                _ => runtime.register::<ToolComponent>(name, &source, policy),
            }
            .with_context(registering)?;
            provenance.insert(format!("component_sha256.{name}"), info.sha256);
        }
        let mut environments = BTreeMap::new();
        for (name, c) in &self.environments {
            let what = || format!("loading environment `{name}` ({})", c.path.display());
            let policy = c.policy(CallPolicy::tool()).with_context(what)?;
            let env = runtime
                .load::<EnvironmentComponent>(&source("environment", c)?)
                .with_context(what)?;
            provenance.insert(
                format!("component_sha256.{name}"),
                env.info().sha256.clone(),
            );
            environments.insert(name.clone(), (Arc::new(env), policy.limits));
        }
        Ok(Components {
            runtime,
            provenance,
            environments,
        })
    }

    /// Each reward's and tool's call policy, checked before anything is loaded.
    fn policies(&self) -> anyhow::Result<Vec<Registration<'_>>> {
        let mut out = Vec::new();
        for (kind, map, defaults) in [
            ("reward", &self.rewards, CallPolicy::default()),
            ("tool", &self.tools, CallPolicy::tool()),
        ] {
            for (name, c) in map {
                let policy = c
                    .policy(defaults.clone())
                    .with_context(|| format!("{kind} `{name}`"))?;
                out.push(Registration {
                    kind,
                    name: name.as_str(),
                    spec: c,
                    policy,
                });
            }
        }
        // The built-in `code` reward runs each case with the tool `python`: where none is given
        // and python-exec is built in, that one, with verl's and SandboxFusion's limits per
        // program (10 s, 1 GiB, no retries) and room for 1 Mi characters of stdout.
        let code = self
            .rewards
            .values()
            .filter_map(|c| builtin::named("reward", &c.path))
            .any(|b| b.name == "code");
        if code
            && !self.tools.contains_key(CODE_RUNNER)
            && builtin::find("tool", "python-exec").is_some()
        {
            let limits = rollbox_runtime::Limits {
                timeout: std::time::Duration::from_secs(10),
                max_memory: 1 << 30,
                max_boundary_bytes: 16 << 20,
                ..rollbox_runtime::Limits::untrusted_tool()
            };
            let policy = CallPolicy {
                limits: Arc::new(limits),
                retries: 0,
            };
            out.push(Registration {
                kind: "tool",
                name: CODE_RUNNER,
                spec: &PYTHON_EXEC,
                policy,
            });
        }
        Ok(out)
    }

    /// The services: the engine (the embedder's, else the spec's, recorded when asked) and the
    /// tokenizer (the spec's, else the engine's own).
    fn services(
        &self,
        engine: Option<Arc<dyn InferenceBackend>>,
    ) -> anyhow::Result<(Services, Option<Arc<HostTokenizer>>)> {
        let version = Arc::new(AtomicI32::new(0));
        let mut services = Services::new().with_version(version.clone());
        let mut tokenizer = match &self.tokenizer {
            Some(path) => {
                Some(Arc::new(HostTokenizer::load(path).with_context(|| {
                    format!("loading the tokenizer {}", path.display())
                })?))
            }
            None => None,
        };
        let backend = match (engine, &self.engine) {
            (Some(e), _) => Some(e),
            (None, Some(spec)) => {
                let e = spec.build(tokenizer.as_ref(), version)?;
                if tokenizer.is_none() {
                    tokenizer = e.tokenizer;
                }
                Some(e.backend)
            }
            (None, None) => None,
        };
        if let Some(backend) = backend {
            let backend: Arc<dyn InferenceBackend> = match &self.record {
                Some(path) => Arc::new(rollbox_engines::replay::RecordingBackend::new(
                    backend, path,
                )?),
                None => backend,
            };
            services = services.with_backend(backend);
        }
        if let Some(t) = &tokenizer {
            services = services.with_tokenizer(t.clone());
        }
        Ok((services, tokenizer))
    }
}

impl Host {
    /// Run one episode of the workflow with the spec's config and limits (the request's
    /// `config` is replaced by the spec's).
    pub async fn run_episode(&self, mut request: EpisodeRequest) -> EpisodeReport {
        request.config = (&self.config).into();
        self.components
            .runtime
            .run_episode(
                &Scope::default(),
                &self.workflow,
                request,
                self.limits.clone(),
            )
            .await
    }

    /// A rollout controller over this host's workflow, config and limits with `options`.
    pub fn rollout(&self, options: RolloutOptions) -> Rollout {
        Rollout {
            runtime: self.components.runtime.clone(),
            workflow: self.workflow.clone(),
            tokenizer: self.tokenizer.clone(),
            config: self.config.clone(),
            limits: self.limits.clone(),
            options,
            provenance: self.components.provenance.clone(),
        }
    }

    /// Set the policy (weight) version stamped on tokens the engine does not stamp itself.
    pub fn set_version(&self, version: i32) {
        self.components.runtime.services().set_version(version);
    }

    /// The current policy version.
    pub fn version(&self) -> i32 {
        self.components.runtime.services().version()
    }

    /// The workflow component (its sha256, world, imports).
    pub fn workflow(&self) -> &WorkflowComponent {
        &self.workflow
    }

    /// The spec's other workflows by name ([`HostSpec::workflows`]), compiled.
    pub fn workflows(&self) -> &BTreeMap<String, Arc<WorkflowComponent>> {
        &self.workflows
    }

    /// Each episode's limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// What every output records: rollbox's version, the engine, each component's sha256.
    pub fn provenance(&self) -> &BTreeMap<String, String> {
        &self.components.provenance
    }

    /// The rewards and tools, to call outside an episode.
    pub fn components(&self) -> &Components {
        &self.components
    }

    /// The runtime, for what the host does not wrap.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.components.runtime
    }
}

/// The tool the built-in `code` reward runs each case with (its `code_reward.runner` default).
const CODE_RUNNER: &str = "python";

/// What a component is (world, imports, exports, size, sha256), without registering it:
/// `path` is a file, or a built-in's name of any world.
pub fn inspect(path: &std::path::Path) -> anyhow::Result<ComponentInfo> {
    let runtime = Runtime::new(RuntimeConfig::default(), Services::new())?;
    let source = match builtin::resolve_any(path) {
        Some(source) => source,
        None => {
            builtin::missing(path)?;
            ComponentSource::File(path.to_path_buf())
        }
    };
    runtime.inspect(source)
}
