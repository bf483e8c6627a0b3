//! kinformer-trace's integration tests, one module per file, in one test binary (one link
//! instead of one per file, issue 28).

mod chromium;
mod cli;
mod fuzz;
mod library;
mod r#loop;
mod replay;
