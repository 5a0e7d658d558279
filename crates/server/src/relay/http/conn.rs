//! The relay's HTTP/1.1 connections: request heads parsed with `httparse`,
//! answers written here.
//!
//! Why not hyper: a relay holds thousands of watches, each a response that
//! lasts minutes, and its memory per watch is the connection's. hyper keeps
//! an 8 KiB read buffer and an 8 KiB header buffer for a connection's whole
//! life (`INIT_BUFFER_SIZE`; no setting goes lower), and a streamed body
//! needs a task of its own beside the connection's. Here a connection is
//! one task; its read buffer exists only while a request head is coming in,
//! and a watch writes its events straight to the connection, a batch of
//! them as one chunk.
//!
//! What a client gets, as RFC 9112 asks of a server:
//! - requests one after another on a connection (keep-alive; pipelined
//!   ones answered in order);
//! - absolute-form targets accepted; an HTTP/1.1 request without `Host`,
//!   or a malformed one, is 400, a head over [`MAX_HEAD`] 431, and the
//!   connection closes after them;
//! - a request body (only writes carry one, and they are 405) is read and
//!   discarded up to [`MAX_BODY`] by `Content-Length`; a chunked or longer
//!   one, or one behind `Expect: 100-continue`, is not read and the
//!   connection closes after the answer;
//! - HTTP/1.0: no chunked framing, and the connection closes after the
//!   answer;
//! - `Date` on every answer, `Allow` on 405, `WWW-Authenticate` on 401;
//! - a client idle for [`IDLE`] between requests, or taking [`HEAD_TIME`]
//!   to send a head, or not reading a write for [`WRITE_STALL`], is closed.

use std::io::Write as _;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode, Uri};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// The longest request head read.
pub const MAX_HEAD: usize = 16 * 1024;
/// Header fields read per request at most.
const MAX_HEADERS: usize = 64;
/// The longest request body read (and discarded) to keep the connection.
pub const MAX_BODY: usize = 64 * 1024;
/// How long a connection may sit idle between requests; longer than the
/// 90 s after which client-go and hyper's pools drop an idle connection.
pub const IDLE: Duration = Duration::from_secs(120);
/// How long a request head may take once it has begun.
pub const HEAD_TIME: Duration = Duration::from_secs(30);
/// How long one write may wait on a client that does not read: then the
/// client is gone or stuck, and resumes from the history on reconnecting.
pub const WRITE_STALL: Duration = Duration::from_secs(60);

/// What the relay reads of a request head.
#[derive(Debug)]
pub struct Head {
    pub method: Method,
    pub uri: Uri,
    /// Shared with the inner watches of a multiplexed one ([`Head::inner`]):
    /// a ServiceAccount token is about a kilobyte.
    pub authorization: Option<std::sync::Arc<str>>,
    pub accept: Option<String>,
    /// HTTP/1.0: no chunked answers, no keep-alive.
    http10: bool,
    /// The connection closes after this answer.
    close: bool,
}

impl Head {
    /// The request an inner watch of a multiplexed one (`uri`) would be:
    /// the same token and `Accept`.
    pub fn inner(&self, uri: Uri) -> Self {
        Self {
            method: Method::GET,
            uri,
            authorization: self.authorization.clone(),
            accept: self.accept.clone(),
            http10: self.http10,
            close: self.close,
        }
    }
}

/// The next thing on a connection.
#[derive(Debug)]
pub enum Next {
    Head(Head),
    /// The client closed, went idle, or the relay is stopping.
    Closed,
    /// A request the relay cannot read: answer this and close.
    Refuse(StatusCode, String),
}

/// One client connection.
pub struct Conn<S> {
    io: S,
    /// Bytes read past the last request head: the next request's.
    pending: Vec<u8>,
    shutdown: CancellationToken,
}

/// A request's body, as its head announces it.
enum Body {
    None,
    Length(usize),
    /// Chunked, or too long to read: the connection closes after.
    Unread,
}

fn parse(req: &httparse::Request<'_, '_>) -> Result<(Head, Body), (StatusCode, String)> {
    let bad = |why: String| (StatusCode::BAD_REQUEST, why);
    let method = Method::from_bytes(req.method.unwrap_or_default().as_bytes())
        .map_err(|_| bad("bad method".into()))?;
    let uri: Uri = req
        .path
        .unwrap_or_default()
        .parse()
        .map_err(|e| bad(format!("bad request target: {e}")))?;
    let http10 = req.version == Some(0);
    let (mut authorization, mut accept, mut host) = (None, None, false);
    let (mut length, mut chunked, mut close) = (None::<usize>, false, http10);
    let mut expect = false;
    for h in req.headers.iter() {
        let value = std::str::from_utf8(h.value).ok().map(str::trim);
        let name = h.name;
        if name.eq_ignore_ascii_case("authorization") {
            authorization = value.map(std::sync::Arc::from);
        } else if name.eq_ignore_ascii_case("accept") {
            accept = value.map(str::to_owned);
        } else if name.eq_ignore_ascii_case("host") {
            host = true;
        } else if name.eq_ignore_ascii_case("content-length") {
            let n = value
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| bad("bad Content-Length".into()))?;
            if length.is_some_and(|l| l != n) {
                return Err(bad("conflicting Content-Length".into()));
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = true;
        } else if name.eq_ignore_ascii_case("expect") {
            // `100-continue`: the client waits before sending its body;
            // the answer (405: only writes carry one) comes without it.
            expect = true;
        } else if name.eq_ignore_ascii_case("connection") {
            let tokens = value.unwrap_or_default().split(',').map(str::trim);
            for t in tokens {
                if t.eq_ignore_ascii_case("close") {
                    close = true;
                }
            }
        }
    }
    if !http10 && !host {
        return Err(bad("an HTTP/1.1 request needs a Host header".into()));
    }
    if chunked && length.is_some() {
        return Err(bad("both Content-Length and Transfer-Encoding".into()));
    }
    let body = match (chunked || expect, length) {
        (true, _) => Body::Unread,
        (false, None | Some(0)) => Body::None,
        (false, Some(n)) if n <= MAX_BODY => Body::Length(n),
        (false, Some(_)) => Body::Unread,
    };
    if matches!(body, Body::Unread) {
        close = true;
    }
    let head = Head {
        method,
        uri,
        authorization,
        accept,
        http10,
        close,
    };
    Ok((head, body))
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    pub fn new(io: S, shutdown: CancellationToken) -> Self {
        Self {
            io,
            pending: Vec::new(),
            shutdown,
        }
    }

    /// Read more into `pending`, by `deadline`: false when the client
    /// closed, the time is up or the relay stops.
    async fn fill(&mut self, deadline: tokio::time::Instant) -> bool {
        self.pending.reserve(1024);
        tokio::select! {
            read = self.io.read_buf(&mut self.pending) => matches!(read, Ok(n) if n > 0),
            () = tokio::time::sleep_until(deadline) => false,
            () = self.shutdown.cancelled() => false,
        }
    }

    /// The next request's head (its body read and dropped).
    pub async fn next(&mut self) -> Next {
        let now = tokio::time::Instant::now();
        // Idle until a head begins; then it has HEAD_TIME to arrive whole.
        let mut began = !self.pending.is_empty();
        let mut deadline = now + if began { HEAD_TIME } else { IDLE };
        let (head, body, used) = loop {
            if !self.pending.is_empty() {
                let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
                let mut req = httparse::Request::new(&mut headers);
                match req.parse(&self.pending) {
                    Ok(httparse::Status::Complete(used)) => match parse(&req) {
                        Ok((head, body)) => break (head, body, used),
                        Err((code, why)) => return Next::Refuse(code, why),
                    },
                    Ok(httparse::Status::Partial) if self.pending.len() >= MAX_HEAD => {
                        return Next::Refuse(
                            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                            format!("request head over {MAX_HEAD} bytes"),
                        );
                    }
                    Ok(httparse::Status::Partial) => {}
                    Err(httparse::Error::TooManyHeaders) => {
                        return Next::Refuse(
                            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                            format!("over {MAX_HEADERS} header fields"),
                        );
                    }
                    Err(e) => {
                        return Next::Refuse(StatusCode::BAD_REQUEST, format!("bad request: {e}"));
                    }
                }
            }
            if self.shutdown.is_cancelled() || !self.fill(deadline).await {
                return Next::Closed;
            }
            if !began {
                began = true;
                deadline = tokio::time::Instant::now() + HEAD_TIME;
            }
        };
        self.pending.drain(..used);
        if let Body::Length(n) = body {
            let deadline = tokio::time::Instant::now() + HEAD_TIME;
            while self.pending.len() < n {
                if !self.fill(deadline).await {
                    return Next::Closed;
                }
            }
            self.pending.drain(..n);
        }
        if self.pending.is_empty() {
            // Nothing pipelined: no buffer kept while the answer lasts.
            self.pending = Vec::new();
        }
        Next::Head(head)
    }

    /// Write all of `buf`, unless the client stops reading for
    /// [`WRITE_STALL`].
    async fn write(&mut self, buf: &[u8]) -> bool {
        let io = &mut self.io;
        let write = async move { io.write_all(buf).await.is_ok() && io.flush().await.is_ok() };
        tokio::time::timeout(WRITE_STALL, write)
            .await
            .unwrap_or(false)
    }

    /// Answer `head` with `body` whole: false if the connection is to close.
    pub async fn reply(
        &mut self,
        head: &Head,
        code: StatusCode,
        content_type: &str,
        body: &[Bytes],
    ) -> bool {
        let len: usize = body.iter().map(Bytes::len).sum();
        let mut out = status_head(code, content_type, head.close).into_bytes();
        let _ = write!(out, "Content-Length: {len}\r\n\r\n");
        if head.method == Method::HEAD {
            return self.write(&out).await && !head.close;
        }
        // Small bodies go with the head; a list's chunks one by one.
        if len <= 16 * 1024 {
            for b in body {
                out.extend_from_slice(b);
            }
            return self.write(&out).await && !head.close;
        }
        if !self.write(&out).await {
            return false;
        }
        for b in body {
            if !self.write(b).await {
                return false;
            }
        }
        !head.close
    }

    /// Refuse an unreadable request; the connection then closes.
    pub async fn refuse(&mut self, code: StatusCode, body: &[u8]) {
        let mut out = status_head(code, "application/json", true).into_bytes();
        let _ = write!(out, "Content-Length: {}\r\n\r\n", body.len());
        out.extend_from_slice(body);
        let _ = self.write(&out).await;
        let _ = self.io.shutdown().await;
    }

    /// Begin a streamed answer (a watch) to `head`: `None` if the client
    /// is gone or asked only for the head.
    pub async fn stream(&mut self, head: &Head, content_type: &str) -> Option<Stream<'_, S>> {
        let chunked = !head.http10;
        let close = head.close || !chunked;
        let mut out = status_head(StatusCode::OK, content_type, close).into_bytes();
        if chunked {
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
        }
        out.extend_from_slice(b"\r\n");
        if !self.write(&out).await || head.method == Method::HEAD {
            return None;
        }
        Some(Stream {
            conn: self,
            chunked,
            close,
        })
    }

    /// Close the connection (after a last answer).
    pub async fn close(mut self) {
        let _ = tokio::time::timeout(WRITE_STALL, self.io.shutdown()).await;
    }
}

/// An answer's status line and the header fields every answer carries.
fn status_head(code: StatusCode, content_type: &str, close: bool) -> String {
    let date = jiff::fmt::rfc2822::DateTimePrinter::new()
        .timestamp_to_rfc9110_string(&jiff::Timestamp::now())
        .unwrap_or_default();
    let mut h = format!(
        "HTTP/1.1 {} {}\r\nDate: {date}\r\nContent-Type: {content_type}\r\nCache-Control: no-cache, private\r\n",
        code.as_u16(),
        code.canonical_reason().unwrap_or("Unknown")
    );
    if code == StatusCode::METHOD_NOT_ALLOWED {
        h.push_str("Allow: GET, HEAD\r\n");
    }
    if code == StatusCode::UNAUTHORIZED {
        h.push_str("WWW-Authenticate: Bearer\r\n");
    }
    if close {
        h.push_str("Connection: close\r\n");
    }
    h
}

/// A streamed answer being written.
pub struct Stream<'a, S> {
    conn: &'a mut Conn<S>,
    chunked: bool,
    close: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Stream<'_, S> {
    /// Send `frames` (one chunk): false if the client is gone.
    pub async fn send(&mut self, frames: &[Bytes]) -> bool {
        let len: usize = frames.iter().map(Bytes::len).sum();
        if len == 0 {
            return true;
        }
        let mut out = Vec::with_capacity(len + 12);
        if self.chunked {
            let _ = write!(out, "{len:x}\r\n");
        }
        for f in frames {
            out.extend_from_slice(f);
        }
        if self.chunked {
            out.extend_from_slice(b"\r\n");
        }
        self.conn.write(&out).await
    }

    /// Resolves when the client has closed the connection (or sent more
    /// than a request head's worth while the stream lasts). Anything it
    /// sends meanwhile is kept as its next request. Cancel-safe.
    pub async fn closed(&mut self) {
        let mut probe = [0u8; 256];
        loop {
            match self.conn.io.read(&mut probe).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    self.conn.pending.extend_from_slice(&probe[..n]);
                    if self.conn.pending.len() > MAX_HEAD {
                        return;
                    }
                }
            }
        }
    }

    /// End the stream: false if the connection is to close.
    pub async fn finish(self) -> bool {
        if self.close || !self.chunked {
            return false;
        }
        self.conn.pending.len() <= MAX_HEAD && self.conn.write(b"0\r\n\r\n").await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::duplex;

    fn conn() -> (Conn<tokio::io::DuplexStream>, tokio::io::DuplexStream) {
        let (a, b) = duplex(64 * 1024);
        (Conn::new(a, CancellationToken::new()), b)
    }

    async fn head(c: &mut Conn<tokio::io::DuplexStream>) -> Head {
        match c.next().await {
            Next::Head(h) => h,
            other => panic!("not a head: {other:?}"),
        }
    }

    async fn refused(c: &mut Conn<tokio::io::DuplexStream>) -> StatusCode {
        match c.next().await {
            Next::Refuse(code, _) => code,
            other => panic!("not refused: {other:?}"),
        }
    }

    /// A watch request in `version` ("1.1", "1.0"), read by `c`.
    async fn watch_request(
        c: &mut Conn<tokio::io::DuplexStream>,
        client: &mut tokio::io::DuplexStream,
        version: &str,
    ) -> Head {
        let host = if version == "1.0" { "" } else { "Host: r\r\n" };
        let req = format!("GET /api/v1/pods?watch=1 HTTP/{version}\r\n{host}\r\n");
        client.write_all(req.as_bytes()).await.unwrap();
        head(c).await
    }

    async fn read_all(mut client: tokio::io::DuplexStream) -> String {
        let mut s = String::new();
        client.read_to_string(&mut s).await.unwrap();
        s
    }

    #[tokio::test]
    async fn pipelined_requests_come_in_order_and_a_body_is_skipped() {
        let (mut c, mut client) = conn();
        client
            .write_all(
                b"GET /api/v1/pods?watch=1 HTTP/1.1\r\nHost: r\r\nAuthorization: Bearer t\r\n\r\n\
                  POST /api/v1/namespaces/ml/pods HTTP/1.1\r\nHost: r\r\nContent-Length: 5\r\n\r\nhello\
                  GET http://r/api HTTP/1.1\r\nhost: r\r\nACCEPT: application/json\r\n\r\n",
            )
            .await
            .unwrap();
        let h = head(&mut c).await;
        assert_eq!((h.method.as_str(), h.uri.path()), ("GET", "/api/v1/pods"));
        assert_eq!(h.uri.query(), Some("watch=1"));
        assert_eq!(h.authorization.as_deref(), Some("Bearer t"));
        assert!(!h.close);
        let h = head(&mut c).await;
        assert_eq!(h.method, Method::POST);
        assert!(!h.close, "a short body is read, the connection kept");
        let h = head(&mut c).await;
        assert_eq!(h.uri.path(), "/api", "absolute form");
        assert_eq!(h.accept.as_deref(), Some("application/json"));
        assert!(c.pending.capacity() == 0, "no buffer kept between requests");
        drop(client);
        assert!(matches!(c.next().await, Next::Closed));
    }

    #[tokio::test]
    async fn a_head_in_pieces_is_read_whole() {
        let (mut c, mut client) = conn();
        let reader = tokio::spawn(async move { head(&mut c).await.uri.to_string() });
        for piece in [
            &b"GET /ap"[..],
            b"i/v1 HTTP/1.1\r\nHo",
            b"st: r\r\n",
            b"\r\n",
        ] {
            client.write_all(piece).await.unwrap();
            tokio::task::yield_now().await;
        }
        assert_eq!(reader.await.unwrap(), "/api/v1");
    }

    #[tokio::test]
    async fn unreadable_requests_are_refused() {
        let (mut c, mut client) = conn();
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        assert_eq!(refused(&mut c).await, StatusCode::BAD_REQUEST, "no Host");

        let (mut c, mut client) = conn();
        client
            .write_all(b"GET /\x01 HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(refused(&mut c).await, StatusCode::BAD_REQUEST);

        let (mut c, mut client) = conn();
        let mut big = b"GET / HTTP/1.1\r\nHost: r\r\nX-Pad: ".to_vec();
        big.resize(MAX_HEAD + 10, b'a');
        client.write_all(&big).await.unwrap();
        assert_eq!(
            refused(&mut c).await,
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
        );

        let (mut c, mut client) = conn();
        client
            .write_all(
                b"GET / HTTP/1.1\r\nHost: r\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            )
            .await
            .unwrap();
        assert_eq!(refused(&mut c).await, StatusCode::BAD_REQUEST);
    }

    #[tokio::test]
    async fn a_chunked_or_long_body_closes_after_the_answer() {
        let (mut c, mut client) = conn();
        client
            .write_all(b"POST / HTTP/1.1\r\nHost: r\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
            .await
            .unwrap();
        let h = head(&mut c).await;
        assert!(
            !c.reply(
                &h,
                StatusCode::METHOD_NOT_ALLOWED,
                "application/json",
                &[Bytes::from_static(b"{}")]
            )
            .await
        );
        c.close().await;
        let text = read_all(client).await;
        assert!(
            text.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
            "{text}"
        );
        assert!(text.contains("\r\nAllow: GET, HEAD\r\n"), "{text}");
        assert!(text.contains("\r\nConnection: close\r\n"), "{text}");
        assert!(text.ends_with("\r\nContent-Length: 2\r\n\r\n{}"), "{text}");
    }

    #[tokio::test]
    async fn a_body_behind_expect_100_continue_is_not_awaited() {
        let (mut c, mut client) = conn();
        client
            .write_all(b"PUT /api/v1/namespaces/ml/pods/p HTTP/1.1\r\nHost: r\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n")
            .await
            .unwrap();
        let h = tokio::time::timeout(Duration::from_secs(5), head(&mut c))
            .await
            .expect("answered without the body");
        assert!(h.close);
    }

    #[tokio::test]
    async fn a_stream_is_chunked_ends_with_the_last_chunk_and_keeps_what_comes_meanwhile() {
        let (mut c, mut client) = conn();
        let h = watch_request(&mut c, &mut client, "1.1").await;
        let mut s = c.stream(&h, "application/json").await.unwrap();
        assert!(
            s.send(&[
                Bytes::from_static(b"{\"a\":1}\n"),
                Bytes::from_static(b"{}\n")
            ])
            .await
        );
        // The client sends its next request while the watch lasts.
        client
            .write_all(b"GET /version HTTP/1.1\r\nHost: r\r\n\r\n")
            .await
            .unwrap();
        let closed = tokio::time::timeout(Duration::from_millis(200), s.closed()).await;
        assert!(closed.is_err(), "a request is not a close");
        assert!(s.finish().await);
        assert_eq!(head(&mut c).await.uri.path(), "/version");
        assert!(c.reply(&h, StatusCode::OK, "application/json", &[]).await);
        drop(c);
        let text = read_all(client).await;
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\nDate: "), "{head}");
        assert!(head.contains("\r\nTransfer-Encoding: chunked"), "{head}");
        assert!(!head.contains("Connection: close"), "{head}");
        assert!(
            body.starts_with("b\r\n{\"a\":1}\n{}\n\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n"),
            "{body:?}"
        );
    }

    #[tokio::test]
    async fn http_1_0_gets_no_chunks_and_a_close() {
        let (mut c, mut client) = conn();
        let h = watch_request(&mut c, &mut client, "1.0").await;
        let mut s = c.stream(&h, "application/json").await.unwrap();
        assert!(s.send(&[Bytes::from_static(b"{}\n")]).await);
        assert!(!s.finish().await, "the connection closes");
        c.close().await;
        let text = read_all(client).await;
        assert!(text.contains("\r\nConnection: close\r\n"), "{text}");
        assert!(!text.contains("chunked"), "{text}");
        assert!(text.ends_with("\r\n\r\n{}\n"), "{text:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_client_and_one_that_reads_nothing_are_closed() {
        let (mut c, _client) = conn();
        let t0 = tokio::time::Instant::now();
        assert!(matches!(c.next().await, Next::Closed));
        assert_eq!(t0.elapsed(), IDLE);

        // A watch to a client that never reads: the write gives up.
        let (a, mut client) = duplex(1024);
        let mut c = Conn::new(a, CancellationToken::new());
        let h = watch_request(&mut c, &mut client, "1.1").await;
        let mut s = c.stream(&h, "application/json").await.unwrap();
        let t0 = tokio::time::Instant::now();
        assert!(!s.send(&[Bytes::from(vec![b'x'; 64 * 1024])]).await);
        assert_eq!(t0.elapsed(), WRITE_STALL);
    }

    #[tokio::test]
    async fn a_stream_sees_the_client_close() {
        let (mut c, mut client) = conn();
        let h = watch_request(&mut c, &mut client, "1.1").await;
        let mut s = c.stream(&h, "application/json").await.unwrap();
        drop(client);
        tokio::time::timeout(Duration::from_secs(5), s.closed())
            .await
            .expect("the close is seen");
    }
}
