//! `nvmedb machine`: the facts about this machine that every result file records.
//!
//! Owns: [`run`]. Invariant: prints exactly the line the lab records (`RunContext::one_line`).

use super::CliError;
use nvmedb_lab::machine::RunContext;

/// Prints the machine line.
pub fn run() -> Result<(), CliError> {
    println!("{}", RunContext::capture().one_line());
    Ok(())
}
