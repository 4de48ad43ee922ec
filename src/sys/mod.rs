//! Process-level utilities any part may use: memory budgets, the allocator's behaviour, a
//! thread's CPU time and panic messages. A leaf: it imports nothing from the rest of the crate.

pub mod budget;
pub mod cpu;
pub mod memory;
pub mod panics;
