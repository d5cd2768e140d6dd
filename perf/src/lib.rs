//! perf_event_open for flamerec's tools: opening events, reading their
//! ring buffers and decoding the records, shared by the recorder, the
//! `stacks` command and the `stall` library.
//!
//! All unsafe code of this crate lives in [`sys`], each block with the
//! reason it holds; [`parse`] works on bytes already copied out of a ring.

#![deny(unsafe_code)]

pub mod parse;
#[allow(unsafe_code)]
pub mod sys;
