//! The `environment` world: an environment for agentic RL (a gym's `reset` and `step`), one
//! instance per episode kept for all its steps, so what [`Environment::reset`] sets up is in
//! memory for every [`Environment::step`]. Imports [`log`] and [`tools`] (with
//! [`tools::Session`]: an environment that runs the model's code keeps a python-exec session).
//!
//! The instance is the episode's: keep its state in a `static` (a `thread_local!` or a
//! `Mutex`); the next episode gets a fresh instance.

pub use crate::bindings::environment::rollbox::workflow::log;
pub use crate::bindings::environment::rollbox::workflow::steps::StepResult;
pub use crate::bindings::environment::rollbox::workflow::tools;

/// An environment.
pub trait Environment {
    /// Start the episode from the dataset row; return the first observation.
    fn reset(row: serde_json::Value) -> Result<String, crate::Error>;

    /// Apply the model's action (its text); say what happened.
    fn step(action: String) -> Result<Step, crate::Error>;
}

/// What one step gives back.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// What the model sees next.
    pub observation: String,
    /// The step's reward (finite).
    pub reward: f64,
    /// Whether the episode is over.
    pub done: bool,
    /// Anything else, a JSON object (`{}` when there is nothing).
    pub metadata: serde_json::Value,
}

impl Step {
    /// A step that goes on with `observation`, reward 0.
    pub fn observe(observation: impl Into<String>) -> Step {
        Step {
            observation: observation.into(),
            reward: 0.0,
            done: false,
            metadata: serde_json::json!({}),
        }
    }
}

impl From<crate::bindings::environment::rollbox::workflow::types::Error> for crate::Error {
    fn from(e: crate::bindings::environment::rollbox::workflow::types::Error) -> Self {
        crate::Error::msg(format!("{e:?}"))
    }
}

#[doc(hidden)]
pub fn __reset<E: Environment>(row: String) -> Result<String, String> {
    let row = serde_json::from_str(&row).map_err(|e| format!("the row is not JSON: {e}"))?;
    E::reset(row).map_err(String::from)
}

#[doc(hidden)]
pub fn __step<E: Environment>(action: String) -> Result<StepResult, String> {
    let s = E::step(action).map_err(String::from)?;
    Ok(StepResult {
        observation: s.observation,
        reward: s.reward,
        done: s.done,
        metadata: s.metadata.to_string(),
    })
}

/// Export an [`Environment`] implementation as the component's `reset` and `step`.
#[macro_export]
macro_rules! export_environment {
    ($ty:ty) => {
        const _: () = {
            struct __RollboxEnvironmentExport;
            impl $crate::bindings::environment::Guest for __RollboxEnvironmentExport {
                fn reset(
                    row: ::std::string::String,
                ) -> ::core::result::Result<::std::string::String, ::std::string::String> {
                    $crate::environment::__reset::<$ty>(row)
                }

                fn step(
                    action: ::std::string::String,
                ) -> ::core::result::Result<
                    $crate::environment::StepResult,
                    ::std::string::String,
                > {
                    $crate::environment::__step::<$ty>(action)
                }
            }
            $crate::bindings::environment::__export_environment_world!(__RollboxEnvironmentExport with_types_in $crate::bindings::environment);
        };
    };
}
