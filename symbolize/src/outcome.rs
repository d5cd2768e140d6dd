//! What naming one module produces: its functions with module-local ids
//! and each frame's chain of them. The engine and every kind of frame
//! (files, kernel, JIT maps, unresolved) share these; a leaf, it imports
//! only the crate's face and `types`.

use flamerec_format::FrameId;
use rustc_hash::FxHashMap;

use crate::types::Unusable;
use crate::Function;

/// What one module's symbolization produced, with module-local function ids.
pub(crate) struct ModuleOutcome {
    pub(crate) functions: Vec<Function>,
    pub(crate) frames: Vec<(FrameId, Vec<u32>)>,
    /// Why some frames could not be named from the binary, if so.
    pub(crate) unusable: Option<Unusable>,
    /// How many frames that left unnamed.
    pub(crate) bad_frames: usize,
}

/// Collects names so each distinct one gets one module-local id.
#[derive(Default)]
pub(crate) struct LocalNames {
    pub(crate) functions: Vec<Function>,
    ids: FxHashMap<String, u32>,
}

impl LocalNames {
    /// The id of `name` (already spelled for folded text), copied only
    /// the first time it is seen.
    pub(crate) fn id(&mut self, name: &str, module: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.functions.len() as u32;
        self.functions.push(Function {
            name: name.to_string(),
            module: module.to_string(),
        });
        self.ids.insert(name.to_string(), id);
        id
    }
}
