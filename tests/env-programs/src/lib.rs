//! Environment guest programs for the integration tests, built without the other worlds.
