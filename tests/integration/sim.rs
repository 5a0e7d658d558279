//! Tests of `podns sim`.
