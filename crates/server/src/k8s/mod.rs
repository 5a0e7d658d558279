//! Reading the API server: slim serde types that decode only what DNS needs
//! ([`slim`]), their conversion into index input ([`convert`]), and the
//! kube-runtime watchers that feed the index writer ([`watch`]); the slim
//! Protobuf decoder ([`pb`]) and the raw list/watch loop that asks for it
//! ([`wire`]); why a request failed, in one line ([`failure`]).

pub mod convert;
pub mod failure;
pub mod pb;
pub mod slim;
pub mod watch;
pub mod wire;
