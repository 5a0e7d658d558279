//! Reading the API server: slim serde types that decode only what DNS needs
//! ([`slim`]), their conversion into index input ([`convert`]), and the
//! kube-runtime watchers that feed the index writer ([`watch`]).

pub mod convert;
pub mod slim;
pub mod watch;
