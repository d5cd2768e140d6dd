//! The on-disk symbol cache, one file per binary by build id (`store`):
//! a fold whose addresses are all cached reads no binary.

mod store;

pub(crate) use store::AddressTable;
pub use store::{default_dir, SymbolCache};
