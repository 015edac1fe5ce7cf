//! The SDK's error type: what a workflow, reward or tool returns when it fails.

use std::fmt;

/// An error with a message, made from any import's error (`?` works on every call), a string,
/// or a JSON error. A workflow returning it fails the episode with its message (counted, logged,
/// never fatal to the host).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: Option<&'static str>,
    message: String,
}

impl Error {
    /// An error with `message`.
    pub fn msg(message: impl Into<String>) -> Self {
        Error {
            kind: None,
            message: message.into(),
        }
    }

    /// The host error's kind when it came from an import (`invalid-argument`, `limit-exceeded`,
    /// `unknown`, `unavailable`, `timeout`, `trapped`, `invalid-output`, `unsupported`).
    pub fn kind(&self) -> Option<&'static str> {
        self.kind
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            Some(kind) => write!(f, "{kind}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for Error {}

impl From<String> for Error {
    fn from(message: String) -> Self {
        Error::msg(message)
    }
}

impl From<&str> for Error {
    fn from(message: &str) -> Self {
        Error::msg(message)
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::msg(format!("JSON: {e}"))
    }
}

impl From<Error> for String {
    fn from(e: Error) -> Self {
        e.to_string()
    }
}

#[cfg(feature = "workflow")]
impl From<crate::types::Error> for Error {
    fn from(e: crate::types::Error) -> Self {
        use crate::types::Error as E;
        let (kind, message) = match e {
            E::InvalidArgument(m) => ("invalid-argument", m),
            E::LimitExceeded(m) => ("limit-exceeded", m),
            E::Unknown(m) => ("unknown", m),
            E::Unavailable(m) => ("unavailable", m),
            E::Timeout(m) => ("timeout", m),
            E::Trapped(m) => ("trapped", m),
            E::InvalidOutput(m) => ("invalid-output", m),
            E::Unsupported(m) => ("unsupported", m),
        };
        Error {
            kind: Some(kind),
            message,
        }
    }
}
