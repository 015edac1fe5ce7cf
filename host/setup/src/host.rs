//! [`Host`]: a built [`HostSpec`], the runtime with its engine, tokenizer, rewards and tools
//! registered and the workflow compiled, ready to run episodes and rollouts.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicI32;

use anyhow::Context as _;
use rollbox_engines::InferenceBackend;
use rollbox_rollout::{Rollout, RolloutOptions};
use rollbox_runtime::{
    CallPolicy, ComponentInfo, ComponentSource, EpisodeReport, EpisodeRequest, Limits, Runtime,
    RuntimeConfig, Services, WorkflowComponent,
};
use rollbox_tokenizer::HostTokenizer;

use crate::builtin;
use crate::spec::HostSpec;

/// A workflow with its runtime, engine, tokenizer, rewards and tools, built from a
/// [`HostSpec`]. Cheap to share: [`Host::rollout`] and [`Host::run_episode`] take `&self`.
pub struct Host {
    runtime: Arc<Runtime>,
    workflow: Arc<WorkflowComponent>,
    tokenizer: Option<Arc<HostTokenizer>>,
    config: serde_json::Value,
    limits: Arc<Limits>,
    provenance: BTreeMap<String, String>,
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

    fn build_inner(&self, engine: Option<Arc<dyn InferenceBackend>>) -> anyhow::Result<Host> {
        let limits = Arc::new(self.limits.apply(Limits::default()).context("limits")?);
        let policies = self.policies()?;
        if let Some(bytes) = self.max_host_memory {
            rollbox_runtime::host_memory().set_limit(usize::try_from(bytes).unwrap_or(usize::MAX));
        }
        let (services, tokenizer) = self.services(engine)?;
        // Fuel metering is decided here, from every limit of the spec, so no entry point can
        // take a fuel limit and forget to meter it (the runtime also refuses a fuel limit it
        // cannot enforce).
        let defaults = RuntimeConfig::default();
        let runtime = Arc::new(Runtime::new(
            RuntimeConfig {
                fuel: self.wants_fuel(),
                max_instances: self.max_instances.unwrap_or(defaults.max_instances),
                ..defaults
            },
            services,
        )?);
        let mut provenance = BTreeMap::from([(
            "rollbox_version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        )]);
        if let Some(e) = &self.engine {
            provenance.insert("engine".into(), e.to_string());
        }
        for (kind, name, path, policy) in policies {
            let source = builtin::resolve(kind, path)?;
            let registering = || format!("registering {kind} `{name}` ({})", path.display());
            let info = match kind {
                "reward" => runtime.register_reward(name, &source, policy),
                _ => runtime.register_tool(name, &source, policy),
            }
            .with_context(registering)?;
            provenance.insert(format!("component_sha256.{name}"), info.sha256);
        }
        let source = builtin::resolve("workflow", &self.workflow)?;
        let workflow = Arc::new(
            runtime
                .load_workflow(&source)
                .with_context(|| format!("loading the workflow {}", self.workflow.display()))?,
        );
        provenance.insert("workflow_sha256".into(), workflow.info().sha256.clone());
        Ok(Host {
            runtime,
            workflow,
            tokenizer,
            config: self.config.clone(),
            limits,
            provenance,
        })
    }

    /// Each reward's and tool's call policy, checked before anything is loaded.
    #[allow(clippy::type_complexity)]
    fn policies(&self) -> anyhow::Result<Vec<(&'static str, &str, &std::path::Path, CallPolicy)>> {
        let mut out = Vec::new();
        for (kind, map, defaults) in [
            ("reward", &self.rewards, CallPolicy::default()),
            ("tool", &self.tools, CallPolicy::tool()),
        ] {
            for (name, c) in map {
                let policy = c
                    .policy(defaults.clone())
                    .with_context(|| format!("{kind} `{name}`"))?;
                out.push((kind, name.as_str(), c.path.as_path(), policy));
            }
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
        self.runtime
            .run_episode(&self.workflow, request, self.limits.clone())
            .await
    }

    /// A rollout controller over this host's workflow, config and limits with `options`.
    pub fn rollout(&self, options: RolloutOptions) -> Rollout {
        Rollout {
            runtime: self.runtime.clone(),
            workflow: self.workflow.clone(),
            tokenizer: self.tokenizer.clone(),
            config: self.config.clone(),
            limits: self.limits.clone(),
            options,
            provenance: self.provenance.clone(),
        }
    }

    /// Set the policy (weight) version stamped on tokens the engine does not stamp itself.
    pub fn set_version(&self, version: i32) {
        self.runtime.services().set_version(version);
    }

    /// The current policy version.
    pub fn version(&self) -> i32 {
        self.runtime.services().version()
    }

    /// The workflow component (its sha256, world, imports).
    pub fn workflow(&self) -> &WorkflowComponent {
        &self.workflow
    }

    /// Each episode's limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// What every output records: rollbox's version, the engine, each component's sha256.
    pub fn provenance(&self) -> &BTreeMap<String, String> {
        &self.provenance
    }

    /// The runtime, for what the host does not wrap.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }
}

/// What a component is (world, imports, exports, size, sha256), without registering it:
/// `path` is a file, or a built-in's name of any world.
pub fn inspect(path: &std::path::Path) -> anyhow::Result<ComponentInfo> {
    let runtime = Runtime::new(RuntimeConfig::default(), Services::new())?;
    let source =
        builtin::resolve_any(path).unwrap_or_else(|| ComponentSource::File(path.to_path_buf()));
    runtime.inspect(source)
}
