//! HTTP plumbing shared by the `sglang` and `openai` backends: one pooled client, a whole-request
//! timeout, and retries with exponential backoff on connection errors, timeouts and 5xx answers.
//!
//! Plain `http://` only: the client is built without TLS (reqwest with default features off), so
//! an `https://` address is refused when a backend is built, with a message saying so.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::EngineError;

/// How long to wait for a response, and how to retry a failed request.
///
/// Defaults follow AReaL's `InferenceEngineConfig` (`request_timeout` 3600 s,
/// `request_retries` 3).
#[derive(Debug, Clone, PartialEq)]
pub struct HttpOptions {
    /// Limit on one whole request: connect, generation and reading the body.
    pub timeout: Duration,
    /// Limit on opening the TCP connection.
    pub connect_timeout: Duration,
    /// Tries per request, the first included (at least 1).
    pub attempts: u32,
    /// Wait before the second try; doubled for each further one.
    pub initial_backoff: Duration,
    /// Cap on the wait between tries.
    pub max_backoff: Duration,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            timeout: Duration::from_secs(3600),
            connect_timeout: Duration::from_secs(10),
            attempts: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
        }
    }
}

/// The wait before try number `attempt + 1` (`attempt` counts from 1): `initial * 2^(attempt-1)`,
/// capped at `max`.
pub(crate) fn backoff(initial: Duration, max: Duration, attempt: u32) -> Duration {
    let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(30));
    initial.saturating_mul(factor).min(max)
}

/// Turns `host:port` or `http://host:port[/prefix]` into a base URL without a trailing slash.
pub(crate) fn base_url(backend: &'static str, address: &str) -> Result<String, EngineError> {
    let address = address.trim();
    let config = |message: String| EngineError::Config {
        path: format!("{backend} address `{address}`"),
        message,
    };
    if address.is_empty() {
        return Err(config("empty address; give host:port".into()));
    }
    if address.starts_with("https://") {
        return Err(config(
            "https is not supported (the client is built without TLS); use http:// or put a \
             plain-http proxy on loopback in front of the server"
                .into(),
        ));
    }
    let url = if address.starts_with("http://") {
        address.to_string()
    } else if address.contains("://") {
        return Err(config("only http:// addresses are supported".into()));
    } else {
        format!("http://{address}")
    };
    Ok(url.trim_end_matches('/').to_string())
}

/// A pooled HTTP client that posts JSON and retries.
pub(crate) struct HttpClient {
    client: reqwest::Client,
    options: HttpOptions,
    backend: &'static str,
    bearer: Option<String>,
}

impl HttpClient {
    /// A client for `backend` (used in error messages).
    pub(crate) fn new(
        backend: &'static str,
        options: HttpOptions,
        bearer: Option<String>,
    ) -> Result<Self, EngineError> {
        let client = reqwest::Client::builder()
            .timeout(options.timeout)
            .connect_timeout(options.connect_timeout)
            .build()
            .map_err(|e| EngineError::Unavailable {
                backend,
                message: format!("cannot build the HTTP client: {}", chain(&e)),
            })?;
        Ok(HttpClient {
            client,
            options,
            backend,
            bearer,
        })
    }

    /// POST `body` as JSON to `url` once, in the background, ignoring the answer (5 s timeout):
    /// for notices such as SGLang's `/abort_request` sent when a caller gave up. Does nothing
    /// outside a tokio runtime.
    pub(crate) fn post_detached(&self, url: String, body: serde_json::Value) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut request = self
            .client
            .post(url)
            .json(&body)
            .timeout(Duration::from_secs(5));
        if let Some(token) = &self.bearer {
            request = request.bearer_auth(token);
        }
        handle.spawn(async move {
            if let Err(e) = request.send().await {
                tracing::debug!("background notice failed: {e}");
            }
        });
    }

    /// POST `body` as JSON to `url` and parse the JSON answer as `T`.
    ///
    /// Connection errors, timeouts and 5xx answers are retried with exponential backoff; after
    /// the last try they become [`EngineError::Unavailable`] naming the URL. A 4xx answer is
    /// [`EngineError::InvalidRequest`] with the server's message; a body that is not the
    /// expected JSON is [`EngineError::Unavailable`] quoting the start of the body.
    pub(crate) async fn post_json<B, T>(&self, url: &str, body: &B) -> Result<T, EngineError>
    where
        B: Serialize + ?Sized,
        T: DeserializeOwned,
    {
        let attempts = self.options.attempts.max(1);
        let mut last = String::new();
        for attempt in 1..=attempts {
            if attempt > 1 {
                let wait = backoff(
                    self.options.initial_backoff,
                    self.options.max_backoff,
                    attempt - 1,
                );
                tokio::time::sleep(wait).await;
            }
            let mut builder = self.client.post(url).json(body);
            if let Some(token) = &self.bearer {
                builder = builder.bearer_auth(token);
            }
            let response = match builder.send().await {
                Ok(response) => response,
                Err(e) => {
                    last = self.describe_send_error(&e);
                    continue;
                }
            };
            let status = response.status();
            let bytes = match response.bytes().await {
                Ok(bytes) => bytes,
                Err(e) => {
                    last = self.describe_send_error(&e);
                    continue;
                }
            };
            if status.is_server_error() {
                last = format!("HTTP {status}: {}", excerpt(&bytes));
                continue;
            }
            if !status.is_success() {
                return Err(EngineError::InvalidRequest {
                    backend: self.backend,
                    message: format!(
                        "{url} rejected the request: HTTP {status}: {}",
                        excerpt(&bytes)
                    ),
                });
            }
            return serde_json::from_slice(&bytes).map_err(|e| EngineError::Unavailable {
                backend: self.backend,
                message: format!(
                    "{url} answered with malformed JSON ({e}); body starts: {}",
                    excerpt(&bytes)
                ),
            });
        }
        Err(EngineError::Unavailable {
            backend: self.backend,
            message: format!("{url} failed after {attempts} attempt(s): {last}"),
        })
    }

    fn describe_send_error(&self, e: &reqwest::Error) -> String {
        if e.is_timeout() {
            format!(
                "timed out after {:.1} s (raise the request timeout if generations are this long)",
                self.options.timeout.as_secs_f64()
            )
        } else if e.is_connect() {
            format!(
                "cannot connect ({}); check that the server is running and reachable",
                chain(e)
            )
        } else {
            chain(e)
        }
    }
}

/// An error and its sources on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The first 200 bytes of a body, for error messages.
fn excerpt(bytes: &[u8]) -> String {
    const MAX_EXCERPT_BYTES: usize = 200;
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_EXCERPT_BYTES)]);
    let mut text = text.trim().replace('\n', " ");
    if bytes.len() > MAX_EXCERPT_BYTES {
        text.push('…');
    }
    if text.is_empty() {
        "<empty body>".into()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let ms = Duration::from_millis;
        assert_eq!(backoff(ms(100), ms(1000), 1), ms(100));
        assert_eq!(backoff(ms(100), ms(1000), 2), ms(200));
        assert_eq!(backoff(ms(100), ms(1000), 4), ms(800));
        assert_eq!(backoff(ms(100), ms(1000), 5), ms(1000));
        assert_eq!(backoff(ms(100), ms(1000), 100), ms(1000));
    }

    #[test]
    fn addresses_become_http_base_urls() {
        assert_eq!(
            base_url("sglang", "127.0.0.1:30000").expect("host:port"),
            "http://127.0.0.1:30000"
        );
        assert_eq!(
            base_url("sglang", "http://h:1/").expect("url"),
            "http://h:1"
        );
        let err = base_url("sglang", "https://h:1").expect_err("https");
        assert!(err.to_string().contains("https is not supported"), "{err}");
        assert!(base_url("sglang", " ").is_err());
        assert!(base_url("sglang", "ftp://h").is_err());
    }

    #[test]
    fn excerpts_are_short_and_single_line() {
        assert_eq!(excerpt(b""), "<empty body>");
        assert_eq!(excerpt(b"a\nb"), "a b");
        assert!(excerpt(&[b'x'; 500]).ends_with('…'));
    }
}
