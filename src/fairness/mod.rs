//! Fairness anyone can verify: the draw of a shuffled pre-queue, committed
//! to before the pre-queue opens and revealed at the open
//! ([`draw`]), and the receipts register signs so that a user can prove
//! when they arrived ([`receipt`]). A leaf: it uses nothing else of ours.

pub mod draw;
pub mod figures;
pub mod receipt;
