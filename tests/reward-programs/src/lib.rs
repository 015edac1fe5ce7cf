//! Reward and tool guest programs for the integration tests, built without the workflow world.
