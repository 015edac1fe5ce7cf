//! Connections: accepted within the total and per-address caps (TLS when given), each
//! request's headers and body read within their time and size caps, and the signal that
//! starts the drain.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::response::Response;

use super::held::{BodyHold, HeldBody};
use super::{BODY_READ_TIMEOUT, HEADER_READ_TIMEOUT, MAX_CONNECTIONS, error};

/// The request body, read within [`BODY_READ_TIMEOUT`] and `cap` bytes, each byte held against
/// the server's body total and the host budget before it is ([`super::held`]).
pub(super) async fn read_body(
    body: axum::body::Body,
    cap: usize,
    host: &std::sync::Arc<rollbox_runtime::HostMemory>,
) -> Result<HeldBody, Response> {
    use axum::body::HttpBody as _;
    // A declared Content-Length over the cap is refused before anything is read.
    let declared = body.size_hint().lower();
    if declared > cap as u64 {
        return Err(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("a body of {declared} bytes; at most {cap}: send fewer rows per request"),
        ));
    }
    match tokio::time::timeout(
        BODY_READ_TIMEOUT,
        collect_capped(body, cap, declared, host.clone()),
    )
    .await
    {
        Ok(result) => result,
        Err(_) => Err(error(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the body did not arrive within {} s",
                BODY_READ_TIMEOUT.as_secs()
            ),
        )),
    }
}

/// The body's bytes, appended frame by frame into one buffer (no collect-then-concatenate:
/// a 64 MiB body is never copied whole in one go on an async worker, nor held twice). The
/// buffer's capacity is held before it is allocated: all of a declared length at once, else
/// each doubling as it comes.
async fn collect_capped(
    mut body: axum::body::Body,
    cap: usize,
    declared: u64,
    host: std::sync::Arc<rollbox_runtime::HostMemory>,
) -> Result<HeldBody, Response> {
    use http_body_util::BodyExt as _;
    let mut hold = BodyHold::new(host);
    // `declared` is at most `cap` (checked by the caller).
    let declared = usize::try_from(declared).unwrap_or(cap).min(cap);
    hold.grow(declared)?;
    let mut buf = Vec::with_capacity(declared);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
            while let Some(err) = source {
                if err.is::<http_body_util::LengthLimitError>() {
                    return error(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "the body is over this tenant's max_body_bytes".into(),
                    );
                }
                source = err.source();
            }
            error(
                StatusCode::BAD_REQUEST,
                format!("cannot read the body: {e}"),
            )
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let len = buf.len() + data.len();
        if len > cap {
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body is over {cap} bytes: send fewer rows per request"),
            ));
        }
        if len > buf.capacity() {
            let grown = len.max(buf.capacity().saturating_mul(2)).min(cap);
            hold.grow(grown.saturating_sub(hold.bytes()))?;
            buf.reserve_exact(grown - buf.len());
        }
        buf.extend_from_slice(&data);
    }
    Ok(HeldBody {
        bytes: buf.into(),
        hold,
    })
}

/// Largest `--tls-cert` or `--tls-key` file, bytes.
const MAX_TLS_FILE_BYTES: u64 = 1 << 20;

/// The TLS side of `--tls-cert` and `--tls-key` (rustls with *ring*; TLS 1.2 and 1.3; HTTP/1.1).
pub(super) fn tls_acceptor(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
    use rustls_pki_types::pem::PemObject as _;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    use tokio_rustls::rustls;
    let read = |path: &std::path::Path, flag: &str| -> anyhow::Result<Vec<u8>> {
        rollbox_runtime::file::read_capped(path, MAX_TLS_FILE_BYTES)
            .map_err(|e| anyhow::anyhow!("{flag} {} {e}", path.display()))
    };
    let certs = CertificateDer::pem_slice_iter(&read(cert, "--tls-cert")?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("--tls-cert {}: {e}", cert.display()))?;
    if certs.is_empty() {
        anyhow::bail!("--tls-cert {} holds no PEM CERTIFICATE", cert.display());
    }
    let private = PrivateKeyDer::from_pem_slice(&read(key, "--tls-key")?).map_err(|e| {
        anyhow::anyhow!(
            "--tls-key {}: no PEM private key ({e}); give the key of --tls-cert",
            key.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, private)
        .map_err(|e| anyhow::anyhow!("--tls-cert and --tls-key do not go together: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// The first SIGTERM or SIGINT.
pub(super) async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => std::future::pending().await,
    }
}

/// Serve one connection's requests until it closes; when `stop` changes (drain), finish the
/// request in flight and close; when the server closes it to make room
/// ([`Waiting::make_room`]), close at once (it was waiting for a request's head).
async fn serve_io<I>(
    io: I,
    service: Tracked,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let entry = service.entry.clone();
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(io, service);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = stop.changed() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
        () = entry.closed.notified() => return Err("closed to make room for a newer connection".into()),
    };
    result.map_err(|e| e.to_string())
}

/// Connections open at once that are waiting for a request's head (just accepted, or idle
/// between keep-alive requests), at most; past it, the one that has waited longest is closed
/// for the new one. Guards the slots of [`MAX_CONNECTIONS`] against half-open connections
/// from many addresses (9 addresses x 120 took all 1,024, and 20 of 25 health probes failed,
/// issue 52): a probe, which sends its head at once, always finds room.
pub const MAX_WAITING_CONNECTIONS: usize = 256;

/// One open connection: since when it has waited for a request's head (microseconds since
/// [`since_start`], plus one; 0 while a request of it is handled or its answer written), and
/// how to close it.
struct Entry {
    id: u64,
    waiting_since: std::sync::atomic::AtomicU64,
    closed: tokio::sync::Notify,
}

/// Microseconds since the first call, plus one (so 0 can mean "not waiting").
fn since_start() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(std::time::Instant::now);
    u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX - 1) + 1
}

impl Entry {
    fn set_waiting(&self, waiting: bool) {
        let since = if waiting { since_start() } else { 0 };
        self.waiting_since
            .store(since, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The open connections, to find the one that has waited longest for a request's head.
#[derive(Default)]
struct Waiting {
    next: std::sync::atomic::AtomicU64,
    open: std::sync::Mutex<std::collections::HashMap<u64, Arc<Entry>>>,
}

impl Waiting {
    /// A new connection, waiting for its first head; forgotten when its [`Forget`] drops.
    fn add(self: &Arc<Self>) -> (Arc<Entry>, Forget) {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let entry = Arc::new(Entry {
            id,
            waiting_since: std::sync::atomic::AtomicU64::new(since_start()),
            closed: tokio::sync::Notify::new(),
        });
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, entry.clone());
        (
            entry,
            Forget {
                waiting: self.clone(),
                id,
            },
        )
    }

    /// Close the connection that has waited longest for a head if `full` (every slot taken)
    /// or [`MAX_WAITING_CONNECTIONS`] are waiting; whether one was closed.
    fn make_room(&self, full: bool) -> bool {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let mut waiting = 0;
        let mut oldest: Option<(u64, u64)> = None;
        for e in open.values() {
            let since = e.waiting_since.load(std::sync::atomic::Ordering::Relaxed);
            if since != 0 {
                waiting += 1;
                if oldest.is_none_or(|(t, _)| since < t) {
                    oldest = Some((since, e.id));
                }
            }
        }
        if !(full || waiting >= MAX_WAITING_CONNECTIONS) {
            return false;
        }
        match oldest.and_then(|(_, id)| open.remove(&id)) {
            Some(e) => {
                e.closed.notify_one();
                true
            }
            None => false,
        }
    }
}

/// Removes a connection from [`Waiting`] when dropped.
struct Forget {
    waiting: Arc<Waiting>,
    id: u64,
}

impl Drop for Forget {
    fn drop(&mut self) {
        self.waiting
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

/// The router as hyper calls it, marking the connection busy from a request's head until its
/// answer's body has been written (or dropped), and waiting otherwise.
#[derive(Clone)]
struct Tracked {
    inner: hyper_util::service::TowerToHyperService<Router>,
    entry: Arc<Entry>,
}

impl hyper::service::Service<hyper::Request<hyper::body::Incoming>> for Tracked {
    type Response = hyper::Response<axum::body::Body>;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn call(&self, req: hyper::Request<hyper::body::Incoming>) -> Self::Future {
        self.entry.set_waiting(false);
        let answer = self.inner.call(req);
        let entry = self.entry.clone();
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| {
                axum::body::Body::new(WaitingWhenDone {
                    body,
                    entry: Some(entry),
                })
            }))
        })
    }
}

/// An answer's body that marks its connection waiting again once written or dropped.
struct WaitingWhenDone {
    body: axum::body::Body,
    entry: Option<Arc<Entry>>,
}

impl WaitingWhenDone {
    fn done(&mut self) {
        if let Some(e) = self.entry.take() {
            e.set_waiting(true);
        }
    }
}

impl Drop for WaitingWhenDone {
    fn drop(&mut self) {
        self.done();
    }
}

impl hyper::body::Body for WaitingWhenDone {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let polled = std::pin::Pin::new(&mut self.body).poll_frame(cx);
        if let std::task::Poll::Ready(None) = polled {
            self.done();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// Connections open per client address.
#[derive(Default)]
struct PerIp(std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>);

/// One connection counted against its address; uncounted when dropped.
struct IpSlot {
    table: Arc<PerIp>,
    ip: std::net::IpAddr,
}

impl PerIp {
    fn take(self: &Arc<Self>, ip: std::net::IpAddr, cap: usize) -> Option<IpSlot> {
        let mut t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = t.entry(ip).or_default();
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(IpSlot {
            table: self.clone(),
            ip,
        })
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut t = self.table.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = t.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                t.remove(&self.ip);
            }
        }
    }
}

/// Accept connections and serve each on its own task, with a header-read timeout and caps on
/// open connections, in all and per client address (`axum::serve` has none of these:
/// half-open connections were held forever).
pub(super) async fn serve_connections(
    listener: tokio::net::TcpListener,
    router: Router,
    per_ip_cap: usize,
    tls: Option<tokio_rustls::TlsAcceptor>,
    drain: impl std::future::Future<Output = ()>,
    drain_timeout: Duration,
) -> anyhow::Result<()> {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let per_ip = Arc::new(PerIp::default());
    let waiting = Arc::new(Waiting::default());
    let (draining, _) = tokio::sync::watch::channel(false);
    let mut refused_logged = std::time::Instant::now() - Duration::from_secs(60);
    tokio::pin!(drain);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = &mut drain => break,
        };
        let (stream, peer) = match accepted {
            Ok(s) => s,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(ip_slot) = per_ip.take(peer.ip(), per_ip_cap) else {
            // A flood would log a line per connection: at most one a second.
            if refused_logged.elapsed() >= Duration::from_secs(1) {
                refused_logged = std::time::Instant::now();
                tracing::warn!(
                    "{} has {per_ip_cap} connections open (--max-connections-per-ip); closing new ones",
                    peer.ip()
                );
            }
            continue;
        };
        // Room for it: the connection that has waited longest for a head is closed when every
        // slot is taken or too many wait; its slot comes back as its task ends.
        let made_room = waiting.make_room(slots.available_permits() == 0);
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => Some(slot),
            Err(_) if made_room => {
                tokio::time::timeout(Duration::from_secs(1), slots.clone().acquire_owned())
                    .await
                    .ok()
                    .and_then(Result::ok)
            }
            Err(_) => None,
        };
        let Some(slot) = slot else {
            if refused_logged.elapsed() >= Duration::from_secs(1) {
                refused_logged = std::time::Instant::now();
                tracing::warn!(
                    "{MAX_CONNECTIONS} connections open, none waiting for a request; closing new ones"
                );
            }
            continue;
        };
        let (entry, forget) = waiting.add();
        let service = Tracked {
            inner: hyper_util::service::TowerToHyperService::new(router.clone()),
            entry,
        };
        let stop = draining.subscribe();
        let tls = tls.clone();
        tokio::spawn(async move {
            let result = match tls {
                None => serve_io(hyper_util::rt::TokioIo::new(stream), service, stop).await,
                // The handshake within the header time: a client that opens a connection
                // and never finishes it holds its slot no longer than a slow request would.
                Some(acceptor) => {
                    match tokio::time::timeout(HEADER_READ_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            serve_io(hyper_util::rt::TokioIo::new(tls), service, stop).await
                        }
                        Ok(Err(e)) => Err(format!("TLS handshake: {e}")),
                        Err(_) => Err("TLS handshake timed out".into()),
                    }
                }
            };
            if let Err(e) = result {
                tracing::debug!("connection from {peer}: {e}");
            }
            drop((forget, slot, ip_slot));
        });
    }
    // Draining: no new connections; open ones finish their request and close.
    drop(listener);
    let _ = draining.send(true);
    let open = MAX_CONNECTIONS - slots.available_permits();
    tracing::info!(
        "draining: {open} connections open, waiting up to {} s",
        drain_timeout.as_secs_f64()
    );
    let all = u32::try_from(MAX_CONNECTIONS).unwrap_or(u32::MAX);
    match tokio::time::timeout(drain_timeout, slots.acquire_many(all)).await {
        Ok(_) => tracing::info!("drained: every request answered"),
        Err(_) => tracing::warn!(
            "drain timeout: {} connections still open are cancelled with their episodes",
            MAX_CONNECTIONS - slots.available_permits()
        ),
    }
    Ok(())
}
