//! Why a request to an API server (or a relay) failed, said in one line of
//! words an operator can act on, and as a metric label. kube's own
//! messages print an API error twice (`ApiError: … (Status { … })`) and a
//! TLS failure as a chain of `client error (Connect)`.

use kube::runtime::watcher;

/// A failure: its `reason` label and its words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// `tls`, `unauthorized`, `forbidden`, `connect` or `other`.
    pub reason: &'static str,
    pub words: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.words)
    }
}

impl Failure {
    fn new(reason: &'static str, words: impl Into<String>) -> Self {
        Self {
            reason,
            words: words.into(),
        }
    }

    /// A kube client error.
    pub fn of(e: &kube::Error) -> Self {
        if let kube::Error::Api(s) = e {
            return Self::of_status(s.code, &s.reason, &s.message);
        }
        // The transport's chain: a TLS alert or a refused connection sits
        // inside io::Errors inside hyper's.
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(err) = next {
            if let Some(tls) = err.downcast_ref::<rustls::Error>() {
                return Self::tls(tls);
            }
            if let Some(io) = err.downcast_ref::<std::io::Error>() {
                use std::io::ErrorKind as K;
                let what = match io.kind() {
                    K::ConnectionRefused => Some("connection refused"),
                    K::TimedOut => Some("connection timed out"),
                    K::HostUnreachable | K::NetworkUnreachable => Some("no route to the address"),
                    K::ConnectionReset | K::ConnectionAborted | K::UnexpectedEof => {
                        Some("connection closed by the server")
                    }
                    _ => None,
                };
                if let Some(what) = what {
                    return Self::new("connect", what);
                }
                // An io::Error's `source` is its inner error's source: the
                // inner error itself (a rustls::Error, another io::Error)
                // is `get_ref`'s.
                if let Some(inner) = io.get_ref() {
                    next = Some(inner);
                    continue;
                }
            }
            next = err.source();
        }
        // The innermost cause is the useful part of a chain that repeats
        // itself on the way out.
        let mut inner: &(dyn std::error::Error + 'static) = e;
        while let Some(s) = inner.source() {
            inner = s;
        }
        let words = if std::ptr::addr_eq(inner, e as &dyn std::error::Error) {
            e.to_string()
        } else {
            format!("{e}: {inner}")
        };
        let reason = if matches!(e, kube::Error::HyperError(_)) || words.contains("(Connect)") {
            "connect"
        } else {
            "other"
        };
        Self::new(reason, first_line(&words))
    }

    /// A watcher's error (list, watch start, an error event, the stream).
    pub fn of_watcher(e: &watcher::Error) -> Self {
        match e {
            watcher::Error::InitialListFailed(k)
            | watcher::Error::WatchStartFailed(k)
            | watcher::Error::WatchFailed(k) => Self::of(k),
            watcher::Error::WatchError(s) => Self::of_status(s.code, &s.reason, &s.message),
            e => Self::new("other", e.to_string()),
        }
    }

    fn of_status(code: u16, reason: &str, message: &str) -> Self {
        let message = first_line(message);
        match code {
            401 => Self::new(
                "unauthorized",
                format!(
                    "401 Unauthorized: {message} (the token is not accepted: expired, revoked, or for another audience)"
                ),
            ),
            403 => Self::new("forbidden", format!("403 Forbidden: {message}")),
            _ => Self::new("other", format!("{code} {reason}: {message}")),
        }
    }

    fn tls(e: &rustls::Error) -> Self {
        use rustls::CertificateError as C;
        let why = match e {
            rustls::Error::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => {
                "the certificate is not signed by the CA this client trusts"
            }
            rustls::Error::InvalidCertificate(C::NotValidForName)
            | rustls::Error::InvalidCertificate(C::NotValidForNameContext { .. }) => {
                "the certificate is not valid for the name dialled (set tls-server-name, or add it to the certificate's names)"
            }
            rustls::Error::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => {
                "the certificate has expired"
            }
            _ => "",
        };
        let words = if why.is_empty() {
            format!("TLS failed: {e}")
        } else {
            format!("TLS verify failed: {why} ({e})")
        };
        Self::new("tls", words)
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            reason: reason.into(),
            message: message.into(),
            ..Default::default()
        }))
    }

    #[test]
    fn api_errors_are_one_line_without_the_status_dump() {
        let f = Failure::of(&status(401, "Unauthorized", "Unauthorized: token expired"));
        assert_eq!(f.reason, "unauthorized");
        assert!(
            f.words
                .starts_with("401 Unauthorized: Unauthorized: token expired")
        );
        assert!(!f.words.contains("Status"), "{}", f.words);
        let f = Failure::of(&status(403, "Forbidden", "x cannot get relays\nmore"));
        assert_eq!(
            (f.reason, f.words.as_str()),
            ("forbidden", "403 Forbidden: x cannot get relays")
        );
        let f = Failure::of_watcher(&watcher::Error::WatchError(Box::new(kube::core::Status {
            code: 410,
            reason: "Expired".into(),
            message: "too old".into(),
            ..Default::default()
        })));
        assert_eq!(f.words, "410 Expired: too old");
    }

    #[test]
    fn tls_failures_say_which() {
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        let wrapped: Box<dyn std::error::Error + Send + Sync> = Box::new(io);
        let e = kube::Error::Service(wrapped);
        let f = Failure::of(&e);
        assert_eq!(f.reason, "tls");
        assert!(f.words.contains("not signed by the CA"), "{}", f.words);
        let refused: Box<dyn std::error::Error + Send + Sync> =
            Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let f = Failure::of(&kube::Error::Service(refused));
        assert_eq!(
            (f.reason, f.words.as_str()),
            ("connect", "connection refused")
        );
    }
}
