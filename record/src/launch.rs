//! Finding the program to run, as a shell would, before forking.

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::RecordError;

/// Resolves `program` through PATH (unless it holds a `/`).
pub fn find_program(program: &OsStr) -> Result<PathBuf, RecordError> {
    let name = program.to_string_lossy().into_owned();
    if program.as_bytes().contains(&b'/') {
        let p = PathBuf::from(program);
        return if p.exists() {
            Ok(p)
        } else {
            Err(RecordError::CommandNotFound(name))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    let mut found_not_exec = None;
    for dir in std::env::split_paths(&path) {
        let cand = dir.join(program);
        if let Ok(meta) = std::fs::metadata(&cand) {
            if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
                return Ok(cand);
            }
            found_not_exec.get_or_insert(cand);
        }
    }
    found_not_exec.ok_or(RecordError::CommandNotFound(name))
}

/// argv and envp as C strings, prepared before fork.
pub fn c_strings(
    path: &Path,
    argv: &[OsString],
) -> Result<(CString, Vec<CString>, Vec<CString>), RecordError> {
    let nul = |what: &str| RecordError::Unsupported(format!("{what} contains a NUL byte"));
    let path = CString::new(path.as_os_str().as_bytes()).map_err(|_| nul("the command path"))?;
    let argv = argv
        .iter()
        .map(|a| CString::new(a.clone().into_vec()).map_err(|_| nul("an argument")))
        .collect::<Result<Vec<_>, _>>()?;
    let envp = std::env::vars_os()
        .filter_map(|(k, v)| {
            let mut kv = k.into_vec();
            kv.push(b'=');
            kv.extend(v.into_vec());
            CString::new(kv).ok()
        })
        .collect();
    Ok((path, argv, envp))
}
