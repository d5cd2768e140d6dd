//! The kernel interfaces flamerec's tools share — the recorder, the
//! `stacks` command and the `stall` library: perf_event_open (opening
//! events, reading their ring buffers, decoding the records) and what
//! /proc says about processes and threads ([`procfs`]).
//!
//! All unsafe code of this crate lives in [`sys`], each block with the
//! reason it holds; [`parse`] works on bytes already copied out of a ring.

#![deny(unsafe_code)]

pub mod parse;
pub mod procfs;
#[allow(unsafe_code)]
pub mod sys;
