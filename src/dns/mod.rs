//! DNS: the record rules ([`answer`]) and the sockets ([`server`]).
