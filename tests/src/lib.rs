//! A strict in-process stand-in for nsqd and nsqlookupd, and the cross-adapter conformance
//! suite. Filled in by the test-broker work.
