//! The on-disk symbol cache, one file per binary by build id (`store`):
//! a fold whose addresses are all cached reads no binary; and beside it
//! where the binary's DWARF functions are (`dies`), for the addresses that
//! are not.

mod dies;
mod store;

pub(crate) use store::AddressTable;
pub use store::{default_dir, SymbolCache};
