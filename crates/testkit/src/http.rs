//! A minimal HTTP GET on loopback (an admin endpoint, a relay's metrics):
//! `(status, body)`, status 0 when nothing answered.

use std::net::SocketAddr;

/// [`blocking::get`] from async code, on tokio's blocking pool (so an
/// in-process server on the test's runtime keeps serving meanwhile).
pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let path = path.to_string();
    tokio::task::spawn_blocking(move || blocking::get(addr, &path))
        .await
        .unwrap()
}

/// The status code and body of an HTTP/1.x response.
pub fn parse(response: &str) -> (u16, String) {
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

pub mod blocking {
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpStream};
    use std::time::Duration;

    /// One HTTP/1.0 GET (2 s to connect, 5 s to read): `(status, body)`,
    /// `(0, "")` when the connection failed.
    pub fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
            return (0, String::new());
        };
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        if write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").is_err() {
            return (0, String::new());
        }
        let mut buf = String::new();
        let _ = s.read_to_string(&mut buf);
        super::parse(&buf)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_status_and_body() {
        assert_eq!(
            super::parse("HTTP/1.1 503 Service Unavailable\r\nx: y\r\n\r\nnot ready"),
            (503, "not ready".to_string())
        );
        assert_eq!(super::parse(""), (0, String::new()));
    }
}
