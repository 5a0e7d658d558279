//! Reading the API server: each kind podns reads in a file of its own
//! ([`objects`]: its fields declared once, decoded from JSON or Protobuf
//! into a slim type, converted into index input, served by the relay), the
//! checks every conversion shares ([`convert`]), the Protobuf framing
//! ([`pb`]), the compact stream between relays and node instances
//! ([`compact`]), the raw list/watch loop of every wire ([`wire`]), the retry
//! loop of every watch ([`watch`]), which hands each event to a tap
//! ([`tap`]): the index writer's ([`updates`]) or a relay's feed; why a
//! request failed, in one line ([`failure`]).

pub mod compact;
pub mod convert;
pub mod failure;
pub mod mux;
pub mod objects;
pub mod pb;
pub mod tap;
pub mod updates;
pub mod watch;
pub mod wire;
