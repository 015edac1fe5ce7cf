//! The `reward` world: a reward function (AReaL's `reward_fn(prompt, completions, prompt_ids,
//! completion_ids, **data)`), scored in its own sandbox per call. Imports [`log`], and
//! [`tools`]: the host's registered tools, each call in a fresh sandbox of its own (a code
//! reward runs each test case through one).

pub use crate::bindings::reward::rollbox::workflow::log;
pub use crate::bindings::reward::rollbox::workflow::tools;
pub use crate::bindings::reward::rollbox::workflow::types::RewardInput;

/// A reward function.
pub trait Reward {
    /// Score one completion; an error is retried by the host, then reported to the workflow.
    fn score(input: RewardInput) -> Result<f64, crate::Error>;
}

#[doc(hidden)]
pub fn __score<R: Reward>(input: RewardInput) -> Result<f64, String> {
    R::score(input).map_err(String::from)
}

/// Export a [`Reward`] implementation as the component's `score`.
#[macro_export]
macro_rules! export_reward {
    ($ty:ty) => {
        const _: () = {
            struct __RollboxRewardExport;
            impl $crate::bindings::reward::Guest for __RollboxRewardExport {
                fn score(
                    input: $crate::reward::RewardInput,
                ) -> ::core::result::Result<f64, ::std::string::String> {
                    $crate::reward::__score::<$ty>(input)
                }
            }
            $crate::bindings::reward::__export_reward_world!(__RollboxRewardExport with_types_in $crate::bindings::reward);
        };
    };
}
