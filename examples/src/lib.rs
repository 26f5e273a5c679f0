//! Runnable programs a user copies from; see the `[[example]]` targets.
//! Each connects to the server named by `ARBOR_SERVER` (default
//! `127.0.0.1:7181`).
