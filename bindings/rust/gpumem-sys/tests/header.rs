//! The declarations of `src/lib.rs` against the C headers and the library's version script.
//!
//! The Rust source is read as text: the functions of its `extern "C"` block, its constants, type
//! aliases and structs. From them a C file is written that includes `<gpumem/gpumem.h>` and, for
//! each declaration, states what the Rust side implies: every function is assigned to a pointer of
//! the type its Rust signature spells, every constant is compared with `_Static_assert`, every
//! struct has its size, alignment and each field's offset and size (as Rust lays them out, measured
//! at run time) asserted, and each field's address is taken as a pointer to the field type Rust
//! gives. `cc -std=c99 -Wall -Werror -fsyntax-only` then fails on any difference: a wrong argument
//! type is an incompatible function pointer, a wrong field type an incompatible or differently
//! signed pointer. Coverage is checked besides: the functions against `lib/gpumem.map`, and the
//! constants, typedefs and struct fields against the headers, both ways.
//!
//! Environment: `GPUMEM_INCLUDE_DIRS` (colon-separated) gives the include directories, by default
//! the repository's `include/` and, when `GPUMEM_LIB_DIR` is set, the `include/` beside it (where a
//! CMake build tree generates `gpumem_version.h`); the test skips, saying so, only when
//! `gpumem_version.h` is in none of them, and fails instead when `GPUMEM_REQUIRE_HEADERS` is `1`
//! (as CI sets it). `GPUMEM_SOURCE_DIR` names the repository if this crate is not inside it; `CC`
//! the C compiler (default `cc`).

use gpumem_sys as sys;
use std::collections::{BTreeMap, BTreeSet};
use std::env;
use std::fs;
use std::io::Write;
use std::mem::{self, MaybeUninit};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};

const DECLARATIONS: &str = include_str!("../src/lib.rs");

#[test]
fn declarations_match_the_headers() {
    assert_eq!(
        sys::GPUMEM_VERSION_STRING,
        format!(
            "{}.{}.{}",
            sys::GPUMEM_VERSION_MAJOR,
            sys::GPUMEM_VERSION_MINOR,
            sys::GPUMEM_VERSION_PATCH
        )
    );
    assert_eq!(
        sys::GPUMEM_VERSION_NUMBER,
        sys::GPUMEM_VERSION_MAJOR * 10000 + sys::GPUMEM_VERSION_MINOR * 100 + sys::GPUMEM_VERSION_PATCH
    );
    let setup = match Setup::find() {
        Some(setup) => setup,
        None => return,
    };
    if let Err(problems) = check(DECLARATIONS, &layouts(), &setup) {
        panic!("src/lib.rs does not match the headers:\n{}", problems);
    }
}

/// The check must be able to fail: declarations with one wrong argument type, one wrong constant
/// and one wrong field type are each reported by the compiler, and a missing function by coverage.
#[test]
fn a_wrong_declaration_fails_the_check() {
    let setup = match Setup::find() {
        Some(setup) => setup,
        None => return,
    };
    let wrong = replace_once(
        DECLARATIONS,
        "pub fn gpumem_pool_set_limit(pool: *mut gpumem_allocator_t, limit: u64)",
        "pub fn gpumem_pool_set_limit(pool: *mut gpumem_allocator_t, limit: u32)",
    );
    let wrong = replace_once(
        &wrong,
        "pub const GPUMEM_ERROR_BUSY: i32 = -14;",
        "pub const GPUMEM_ERROR_BUSY: i32 = -41;",
    );
    let wrong = replace_once(&wrong, "    pub arena_count: u32,\n", "    pub arena_count: i32,\n");
    let problems = check(&wrong, &layouts(), &setup).expect_err("wrong declarations passed the check");
    for label in [
        "function gpumem_pool_set_limit",
        "constant GPUMEM_ERROR_BUSY",
        "field gpumem_pool_info_t.arena_count",
    ] {
        assert!(
            problems.contains(&format!("{}: ", label)),
            "{} is not reported:\n{}",
            label,
            problems
        );
    }
    assert!(
        !problems.contains("function gpumem_alloc:"),
        "a right declaration is reported:\n{}",
        problems
    );

    let missing = replace_once(
        DECLARATIONS,
        "pub fn gpumem_reclaim_remove(id: u64) -> gpumem_status_t;",
        "",
    );
    let problems = check(&missing, &layouts(), &setup).expect_err("a missing function passed the check");
    assert!(
        problems.contains("gpumem_reclaim_remove is exported (lib/gpumem.map) but not declared"),
        "the missing function is not reported:\n{}",
        problems
    );
}

fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "src/lib.rs no longer has {:?} once",
        from
    );
    text.replacen(from, to, 1)
}

// Layouts: what Rust computes for each struct, which the C side must agree with.

// Public, as the C writer's functions that take them are (within this test).
pub struct FieldLayout {
    pub name: &'static str,
    pub offset: usize,
    pub size: usize,
}

pub struct StructLayout {
    pub name: &'static str,
    pub size: usize,
    pub align: usize,
    pub fields: Vec<FieldLayout>,
}

fn size_of_pointee<T>(_: *const T) -> usize {
    mem::size_of::<T>()
}

macro_rules! layout {
    ($name:ident { $($field:ident),* $(,)? }) => {{
        let value = MaybeUninit::<sys::$name>::uninit();
        let base = value.as_ptr();
        StructLayout {
            name: stringify!($name),
            size: mem::size_of::<sys::$name>(),
            align: mem::align_of::<sys::$name>(),
            fields: vec![$({
                // SAFETY: addr_of! takes the field's address without reading it or making a reference.
                let field = unsafe { ptr::addr_of!((*base).$field) };
                FieldLayout {
                    name: stringify!($field),
                    offset: field as usize - base as usize,
                    size: size_of_pointee(field),
                }
            }),*],
        }
    }};
}

/// Every struct of src/lib.rs with every field; the check fails when a struct or field is missing here.
fn layouts() -> Vec<StructLayout> {
    vec![
        layout!(gpumem_managed_range_info_t {
            struct_size,
            read_mostly,
            preferred_location,
            last_prefetch_location,
            accessed_by,
        }),
        layout!(gpumem_pointer_info_t {
            struct_size,
            memory_type,
            device,
            is_managed,
            is_pinned,
            host_ptr,
            device_ptr,
            base,
            size,
        }),
        layout!(gpumem_device_info_t {
            struct_size,
            name,
            total_memory,
            compute_capability_major,
            compute_capability_minor,
            unified_addressing,
            managed_memory,
            concurrent_managed_access,
            memory_pools,
            pageable_memory_access,
            host_register,
            can_map_host_memory,
        }),
        layout!(gpumem_array_desc_t {
            struct_size,
            device,
            format,
            channels,
            width,
            height,
            depth
        }),
        layout!(gpumem_copy2d_t {
            struct_size,
            dst,
            dst_array,
            dst_x,
            dst_y,
            dst_pitch,
            src,
            src_array,
            src_x,
            src_y,
            src_pitch,
            width,
            height,
        }),
        layout!(gpumem_copy3d_t {
            struct_size,
            dst,
            dst_array,
            dst_x,
            dst_y,
            dst_z,
            dst_pitch,
            dst_height,
            src,
            src_array,
            src_x,
            src_y,
            src_z,
            src_pitch,
            src_height,
            width,
            height,
            depth,
        }),
        layout!(gpumem_allocator_functions_t {
            struct_size,
            context,
            device,
            alloc,
            free,
            destroy,
            reserve,
            unreserve,
            map,
            unmap,
            map_unit,
            range_size,
        }),
        layout!(gpumem_allocator_stats_t {
            struct_size,
            bytes_in_use,
            peak_bytes_in_use,
            bytes_requested,
            bytes_reserved,
            peak_bytes_reserved,
            alloc_count,
            free_count,
            upstream_alloc_count,
            upstream_free_count,
            retry_count,
            oom_count,
        }),
        layout!(gpumem_hook_info_t {
            struct_size,
            event,
            device,
            allocator,
            size,
            mem_size,
            ptr,
            stream,
            status
        }),
        layout!(gpumem_pool_params_t {
            struct_size,
            upstream,
            limit,
            limit_fraction
        }),
        layout!(gpumem_pool_growth_info_t {
            struct_size,
            mapped_bytes,
            map_calls,
            moved_bytes,
            move_calls,
            returned_bytes,
            fences_recorded,
            driver_ns,
        }),
        layout!(gpumem_pool_info_t {
            struct_size,
            used_bytes,
            free_bytes,
            total_bytes,
            free_block_count,
            limit,
            arena_count,
            pending_bytes,
            address_bytes,
        }),
        layout!(gpumem_block_info_t {
            struct_size,
            segment,
            segment_size,
            address,
            size,
            requested,
            state,
            stream
        }),
        layout!(gpumem_cuda_pool_params_t {
            struct_size,
            device,
            source,
            pool,
            max_size,
            release_threshold,
            flags
        }),
        layout!(gpumem_cuda_pool_info_t {
            struct_size,
            reserved,
            reserved_high,
            used,
            used_high,
            release_threshold
        }),
        layout!(gpumem_vm_params_t {
            struct_size,
            device,
            range_size,
            map_unit
        }),
        layout!(gpumem_vm_info_t {
            struct_size,
            map_unit,
            range_size,
            reserved_bytes,
            mapped_bytes
        }),
        layout!(gpumem_cupy_target_t {
            struct_size,
            allocator,
            stream
        }),
        layout!(gpumem_pin_stats_t {
            struct_size,
            bytes_registered,
            bytes_pinned,
            bytes_cached,
            registrations,
            pins,
            unpins,
            hits,
            misses,
            evictions,
            cache_budget,
        }),
        layout!(gpumem_trace_header_t {
            struct_size,
            version,
            device,
            start_unix_ns,
            kind
        }),
        layout!(gpumem_trace_record_t {
            struct_size,
            event,
            thread,
            time_ns,
            stream,
            address,
            size,
            mem_size,
            status
        }),
    ]
}

// Where the headers, the version script and the compiler are.

struct Setup {
    include_dirs: Vec<PathBuf>,
    headers: Vec<PathBuf>,
    map: PathBuf,
    cc: String,
}

impl Setup {
    /// None (after saying why) when gpumem_version.h cannot be found, unless GPUMEM_REQUIRE_HEADERS
    /// is 1; panics on anything else missing.
    fn find() -> Option<Setup> {
        let source_dir = match env::var_os("GPUMEM_SOURCE_DIR") {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => {
                let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..");
                fs::canonicalize(&dir).unwrap_or(dir)
            }
        };
        let include_dirs: Vec<PathBuf> = match env::var("GPUMEM_INCLUDE_DIRS") {
            Ok(dirs) if !dirs.is_empty() => dirs.split(':').filter(|d| !d.is_empty()).map(PathBuf::from).collect(),
            _ => {
                let mut dirs = vec![source_dir.join("include")];
                if let Some(lib_dir) = env::var_os("GPUMEM_LIB_DIR").filter(|d| !d.is_empty()) {
                    dirs.push(Path::new(&lib_dir).join("../include"));
                }
                dirs
            }
        };
        let required = env::var_os("GPUMEM_REQUIRE_HEADERS").map_or(false, |v| v == "1");
        match Setup::find_in(&source_dir, include_dirs) {
            Ok(setup) => Some(setup),
            Err(why) => skip_unless_required(&why, required),
        }
    }

    /// Err(why) when gpumem_version.h is in none of the directories; panics on anything else missing.
    fn find_in(source_dir: &Path, include_dirs: Vec<PathBuf>) -> Result<Setup, String> {
        if !include_dirs.iter().any(|d| d.join("gpumem/gpumem_version.h").is_file()) {
            return Err(format!(
                "gpumem/gpumem_version.h (generated by the CMake build) is in none of {:?}; set GPUMEM_INCLUDE_DIRS \
                 to the repository's include/ and the build tree's include/, colon-separated",
                include_dirs
            ));
        }
        // The headers as the compiler finds them: the first directory holding a name wins.
        let mut by_name = BTreeMap::new();
        for dir in &include_dirs {
            if let Ok(entries) = fs::read_dir(dir.join("gpumem")) {
                for entry in entries.flatten() {
                    let path = entry.path();
                    if path.extension().map_or(false, |e| e == "h") {
                        by_name.entry(entry.file_name()).or_insert(path);
                    }
                }
            }
        }
        assert!(
            by_name.contains_key(std::ffi::OsStr::new("gpumem.h")),
            "gpumem/gpumem.h is in none of {:?}",
            include_dirs
        );
        let map = source_dir.join("lib/gpumem.map");
        assert!(
            map.is_file(),
            "{} is missing: set GPUMEM_SOURCE_DIR to the repository",
            map.display()
        );
        Ok(Setup {
            include_dirs,
            headers: by_name.into_values().collect(),
            map,
            cc: env::var("CC")
                .ok()
                .filter(|cc| !cc.is_empty())
                .unwrap_or_else(|| "cc".to_string()),
        })
    }
}

/// A check that cannot run for want of headers: skipped, saying why, or, where
/// GPUMEM_REQUIRE_HEADERS=1 (CI) says the headers are there to be checked, a failure.
fn skip_unless_required(why: &str, required: bool) -> Option<Setup> {
    if required {
        panic!("{} (GPUMEM_REQUIRE_HEADERS=1: the headers must be found)", why);
    }
    // Straight to stderr, which the test harness does not capture, so that CI logs show it.
    let thread = std::thread::current();
    let _ = writeln!(
        std::io::stderr(),
        "{}: skipped: {}",
        thread.name().unwrap_or("header"),
        why
    );
    None
}

/// Missing headers are a skip only where they are not required: CI must not pass a check that
/// did not run.
#[test]
fn missing_headers_fail_when_required() {
    let nowhere = vec![PathBuf::from("/nonexistent/gpumem-include")];
    let why = match Setup::find_in(Path::new("/nonexistent"), nowhere) {
        Ok(_) => panic!("headers found in a directory that does not exist"),
        Err(why) => why,
    };
    assert!(why.contains("gpumem_version.h"), "{}", why);
    let failed = std::panic::catch_unwind(|| skip_unless_required(&why, true));
    assert!(failed.is_err(), "a required check skipped");
}

// The check both tests call.

/// Checks Rust declarations (the text of a src/lib.rs) with the struct layouts Rust computed;
/// Err lists every problem found, one a line, each starting with what it is about.
fn check(source: &str, layouts: &[StructLayout], setup: &Setup) -> Result<(), String> {
    let decls = rust::parse(source).map_err(|e| format!("src/lib.rs cannot be read: {}", e))?;
    let mut problems = Vec::new();
    coverage(&decls, layouts, setup, &mut problems);
    match c_check::source(&decls, layouts) {
        Ok(lines) => compile(&lines, setup, &mut problems),
        Err(e) => problems.push(e),
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

fn coverage(decls: &rust::Decls, layouts: &[StructLayout], setup: &Setup, problems: &mut Vec<String>) {
    let map = fs::read_to_string(&setup.map).expect("reading lib/gpumem.map");
    let exported: BTreeSet<String> = map
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("gpumem_") && l.ends_with(';'))
        .map(|l| l.trim_end_matches(';').trim().to_string())
        .collect();
    let mut declared = BTreeSet::new();
    for f in &decls.fns {
        if !declared.insert(f.name.clone()) {
            problems.push(format!("function {}: declared twice", f.name));
        }
    }
    for name in exported.difference(&declared) {
        problems.push(format!("{} is exported (lib/gpumem.map) but not declared", name));
    }
    for name in declared.difference(&exported) {
        problems.push(format!("{} is declared but not exported (lib/gpumem.map)", name));
    }

    let header = c_header::scan(&setup.headers);
    let consts: BTreeSet<&str> = decls.consts.iter().map(|c| c.name.as_str()).collect();
    for name in &header.constants {
        if !consts.contains(name.as_str()) {
            problems.push(format!("constant {}: in the headers but not declared", name));
        }
    }
    for name in &consts {
        if !header.constants.contains(*name) {
            problems.push(format!("constant {}: declared but not in the headers", name));
        }
    }
    let types: BTreeSet<&str> = decls
        .structs
        .iter()
        .map(|s| s.name.as_str())
        .chain(decls.aliases.iter().map(|a| a.name.as_str()))
        .collect();
    for name in &header.typedefs {
        if !types.contains(name.as_str()) {
            problems.push(format!("type {}: a typedef of the headers but not declared", name));
        }
    }
    for name in types.iter().filter(|n| n.starts_with("gpumem_")) {
        if !header.typedefs.contains(*name) {
            problems.push(format!("type {}: declared but not a typedef of the headers", name));
        }
    }
    for s in &decls.structs {
        if !s.repr_c {
            problems.push(format!("struct {}: not #[repr(C)]", s.name));
        }
        if s.opaque() {
            if header.struct_fields.contains_key(&s.name) {
                problems.push(format!(
                    "struct {}: opaque here, but the header gives its fields",
                    s.name
                ));
            }
            continue;
        }
        let names: Vec<&str> = s.fields.iter().map(|f| f.name.as_str()).collect();
        match header.struct_fields.get(&s.name) {
            Some(c_names) if *c_names != names => problems.push(format!(
                "struct {}: fields {:?}, the header's are {:?}",
                s.name, names, c_names
            )),
            Some(_) => {}
            None => problems.push(format!("struct {}: the headers define no such struct", s.name)),
        }
        match layouts.iter().find(|l| l.name == s.name) {
            Some(l) if l.fields.iter().map(|f| f.name).collect::<Vec<_>>() != names => problems.push(format!(
                "struct {}: layouts() in tests/header.rs lists other fields than src/lib.rs",
                s.name
            )),
            Some(_) => {}
            None => problems.push(format!("struct {}: missing from layouts() in tests/header.rs", s.name)),
        }
    }
    for name in header.struct_fields.keys() {
        if !decls.structs.iter().any(|s| &s.name == name) {
            problems.push(format!("struct {}: in the headers but not declared", name));
        }
    }
}

static COMPILES: AtomicUsize = AtomicUsize::new(0);

/// Compiles the generated lines; each error is reported under the label of the line it is on.
fn compile(lines: &[(String, String)], setup: &Setup, problems: &mut Vec<String>) {
    let mut text = String::new();
    for (line, _) in lines {
        text.push_str(line);
        text.push('\n');
    }
    let path = env::temp_dir().join(format!(
        "gpumem-sys-header-{}-{}.c",
        std::process::id(),
        COMPILES.fetch_add(1, Ordering::SeqCst)
    ));
    fs::write(&path, &text).expect("writing the C check file");
    let mut cc = Command::new(&setup.cc);
    cc.args(["-std=c99", "-Wall", "-Werror", "-fsyntax-only"]);
    for dir in &setup.include_dirs {
        cc.arg(format!("-I{}", dir.display()));
    }
    let output = cc.arg(&path).output();
    let _ = fs::remove_file(&path);
    let output = output.unwrap_or_else(|e| panic!("cannot run the C compiler {:?} (set CC): {}", setup.cc, e));
    if output.status.success() {
        return;
    }
    let diagnostics = String::from_utf8_lossy(&output.stderr).into_owned() + &String::from_utf8_lossy(&output.stdout);
    let prefix = format!("{}:", path.display());
    let mut labelled = 0;
    for diagnostic in diagnostics.lines() {
        let rest = match diagnostic.strip_prefix(&prefix) {
            Some(rest) => rest,
            None => continue,
        };
        let mut parts = rest.splitn(3, ':');
        let line: usize = match parts.next().and_then(|n| n.parse().ok()) {
            Some(n) => n,
            None => continue,
        };
        let message = parts.nth(1).unwrap_or("").trim();
        if !message.starts_with("error") {
            continue;
        }
        if let Some((code, label)) = lines.get(line.wrapping_sub(1)) {
            problems.push(format!("{}: {}\n    in: {}", label, message, code.trim()));
            labelled += 1;
        }
    }
    if labelled == 0 {
        problems.push(format!("the C check does not compile:\n{}", diagnostics));
    }
}

/// src/lib.rs as declarations: a small reader for the subset of Rust it is written in.
mod rust {
    #[derive(Clone, Debug, PartialEq)]
    pub enum Tok {
        Ident(String),
        Num(String),
        Str(String),
        Punct(&'static str),
    }

    #[derive(Clone, Debug)]
    pub enum Type {
        /// A primitive, or a named type of the crate (the last segment of a path).
        Named(String),
        Ptr {
            is_const: bool,
            to: Box<Type>,
        },
        Array {
            of: Box<Type>,
            len: String,
        },
        /// A function pointer, nullable when written `Option<...>` (as C's are).
        Fn {
            params: Vec<Type>,
            ret: Option<Box<Type>>,
        },
        /// `&str`, for string constants.
        Str,
        /// A generic type (`PhantomData<...>`), which only opaque structs' private fields use.
        Other(String),
    }

    pub struct Function {
        pub name: String,
        pub params: Vec<Type>,
        pub ret: Option<Type>,
    }

    pub struct Const {
        pub name: String,
        pub ty: Type,
        pub value: Vec<Tok>,
    }

    pub struct Alias {
        pub name: String,
        pub ty: Type,
    }

    pub struct Field {
        pub name: String,
        pub ty: Type,
    }

    pub struct Struct {
        pub name: String,
        pub repr_c: bool,
        pub fields: Vec<Field>,
    }

    impl Struct {
        /// Opaque handle types have only private marker fields.
        pub fn opaque(&self) -> bool {
            self.fields.iter().all(|f| f.name.starts_with('_'))
        }
    }

    #[derive(Default)]
    pub struct Decls {
        pub fns: Vec<Function>,
        pub consts: Vec<Const>,
        pub aliases: Vec<Alias>,
        pub structs: Vec<Struct>,
    }

    const PUNCTS: [&str; 20] = [
        "->", "::", "#", "!", "[", "]", "(", ")", "{", "}", "<", ">", ",", ";", ":", "=", "*", "&", "-", "|",
    ];
    const MORE_PUNCTS: [&str; 3] = ["+", "/", "."];

    pub fn tokenize(src: &str) -> Result<Vec<Tok>, String> {
        let bytes = src.as_bytes();
        let mut toks = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            let c = bytes[i];
            let rest = &src[i..];
            if c.is_ascii_whitespace() {
                i += 1;
            } else if rest.starts_with("//") {
                i += rest.find('\n').unwrap_or(rest.len());
            } else if rest.starts_with("/*") {
                let mut depth = 0;
                let mut j = i;
                loop {
                    if src[j..].starts_with("/*") {
                        depth += 1;
                        j += 2;
                    } else if src[j..].starts_with("*/") {
                        depth -= 1;
                        j += 2;
                        if depth == 0 {
                            break;
                        }
                    } else if j >= bytes.len() {
                        return Err("unterminated block comment".into());
                    } else {
                        j += 1;
                    }
                }
                i = j;
            } else if c.is_ascii_alphabetic() || c == b'_' {
                let end = rest
                    .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
                    .unwrap_or(rest.len());
                toks.push(Tok::Ident(rest[..end].to_string()));
                i += end;
            } else if c.is_ascii_digit() {
                let end = rest
                    .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
                    .unwrap_or(rest.len());
                toks.push(Tok::Num(rest[..end].to_string()));
                i += end;
            } else if c == b'"' {
                let mut j = i + 1;
                while j < bytes.len() && bytes[j] != b'"' {
                    j += if bytes[j] == b'\\' { 2 } else { 1 };
                }
                if j >= bytes.len() {
                    return Err("unterminated string".into());
                }
                toks.push(Tok::Str(src[i..=j].to_string()));
                i = j + 1;
            } else if let Some(p) = PUNCTS.iter().chain(MORE_PUNCTS.iter()).find(|p| rest.starts_with(**p)) {
                toks.push(Tok::Punct(p));
                i += p.len();
            } else {
                return Err(format!("unexpected character {:?}", rest.chars().next().unwrap_or(' ')));
            }
        }
        Ok(toks)
    }

    struct Parser {
        toks: Vec<Tok>,
        pos: usize,
    }

    impl Parser {
        fn peek(&self) -> Option<&Tok> {
            self.toks.get(self.pos)
        }

        fn next(&mut self) -> Result<Tok, String> {
            let tok = self.toks.get(self.pos).cloned().ok_or("unexpected end of file")?;
            self.pos += 1;
            Ok(tok)
        }

        fn is(&self, p: &str) -> bool {
            matches!(self.peek(), Some(Tok::Punct(q)) if *q == p)
        }

        fn is_ident(&self, word: &str) -> bool {
            matches!(self.peek(), Some(Tok::Ident(w)) if w == word)
        }

        fn expect(&mut self, p: &str) -> Result<(), String> {
            match self.next()? {
                Tok::Punct(q) if q == p => Ok(()),
                other => Err(format!("expected `{}`, found {:?} (token {})", p, other, self.pos - 1)),
            }
        }

        fn ident(&mut self) -> Result<String, String> {
            match self.next()? {
                Tok::Ident(w) => Ok(w),
                other => Err(format!("expected a name, found {:?} (token {})", other, self.pos - 1)),
            }
        }

        /// The tokens up to (not including) one of `ends` outside any brackets; `<` and `>` count
        /// as brackets in types, not in values (`32 << 20`).
        fn until_in(&mut self, ends: &[&str], angles: bool) -> Result<Vec<Tok>, String> {
            let start = self.pos;
            let mut depth = 0i32;
            loop {
                match self.peek() {
                    None => return Err("unexpected end of file".into()),
                    Some(Tok::Punct(p)) if depth == 0 && ends.contains(p) => break,
                    Some(Tok::Punct("(" | "[" | "{")) => depth += 1,
                    Some(Tok::Punct(")" | "]" | "}")) => depth -= 1,
                    Some(Tok::Punct("<")) if angles => depth += 1,
                    Some(Tok::Punct(">")) if angles => depth -= 1,
                    _ => {}
                }
                self.pos += 1;
            }
            Ok(self.toks[start..self.pos].to_vec())
        }

        fn until(&mut self, ends: &[&str]) -> Result<Vec<Tok>, String> {
            self.until_in(ends, true)
        }

        /// An attribute `#[...]` or `#![...]`; true if it is `#[repr(C)]`.
        fn attribute(&mut self) -> Result<bool, String> {
            self.expect("#")?;
            if self.is("!") {
                self.pos += 1;
            }
            self.expect("[")?;
            let body = self.until(&["]"])?;
            self.expect("]")?;
            Ok(body
                == [
                    Tok::Ident("repr".into()),
                    Tok::Punct("("),
                    Tok::Ident("C".into()),
                    Tok::Punct(")"),
                ])
        }

        fn visibility(&mut self) {
            if self.is_ident("pub") {
                self.pos += 1;
            }
        }

        fn items(&mut self) -> Result<Decls, String> {
            let mut decls = Decls::default();
            let mut repr_c = false;
            while let Some(tok) = self.peek().cloned() {
                if tok == Tok::Punct("#") {
                    repr_c |= self.attribute()?;
                    continue;
                }
                self.visibility();
                match self.ident()?.as_str() {
                    "use" => {
                        self.until(&[";"])?;
                        self.expect(";")?;
                    }
                    "const" => {
                        let name = self.ident()?;
                        self.expect(":")?;
                        let ty = parse_type(&self.until(&["="])?)?;
                        self.expect("=")?;
                        let value = self.until_in(&[";"], false)?;
                        self.expect(";")?;
                        decls.consts.push(Const { name, ty, value });
                    }
                    "type" => {
                        let name = self.ident()?;
                        self.expect("=")?;
                        let ty = parse_type(&self.until(&[";"])?)?;
                        self.expect(";")?;
                        decls.aliases.push(Alias { name, ty });
                    }
                    "struct" => {
                        let name = self.ident()?;
                        self.expect("{")?;
                        let mut fields = Vec::new();
                        while !self.is("}") {
                            while self.is("#") {
                                self.attribute()?;
                            }
                            self.visibility();
                            let name = self.ident()?;
                            self.expect(":")?;
                            let ty = parse_type(&self.until(&[",", "}"])?)?;
                            if self.is(",") {
                                self.pos += 1;
                            }
                            fields.push(Field { name, ty });
                        }
                        self.expect("}")?;
                        decls.structs.push(Struct { name, repr_c, fields });
                    }
                    "extern" => {
                        match self.next()? {
                            Tok::Str(abi) if abi == "\"C\"" => {}
                            other => return Err(format!("expected extern \"C\", found {:?}", other)),
                        }
                        self.expect("{")?;
                        while !self.is("}") {
                            if self.is("#") {
                                self.attribute()?;
                                continue;
                            }
                            self.visibility();
                            match self.ident()?.as_str() {
                                "fn" => {}
                                other => return Err(format!("expected fn in the extern block, found {}", other)),
                            }
                            let name = self.ident()?;
                            self.expect("(")?;
                            let params = parse_params(&self.until(&[")"])?)?;
                            self.expect(")")?;
                            let ret = if self.is("->") {
                                self.pos += 1;
                                Some(parse_type(&self.until(&[";"])?)?)
                            } else {
                                None
                            };
                            self.expect(";")?;
                            decls.fns.push(Function { name, params, ret });
                        }
                        self.expect("}")?;
                    }
                    other => {
                        return Err(format!(
                            "an item this reader does not know: `{}` (token {})",
                            other, self.pos
                        ))
                    }
                }
                repr_c = false;
            }
            Ok(decls)
        }
    }

    /// Parameters `name: Type, ...` (names optional), as their types.
    fn parse_params(toks: &[Tok]) -> Result<Vec<Type>, String> {
        let mut params = Vec::new();
        let mut depth = 0i32;
        let mut start = 0;
        for i in 0..=toks.len() {
            let ends_param = match toks.get(i) {
                None => true,
                Some(Tok::Punct(",")) => depth == 0,
                Some(Tok::Punct("(" | "[" | "<")) => {
                    depth += 1;
                    false
                }
                Some(Tok::Punct(")" | "]" | ">")) => {
                    depth -= 1;
                    false
                }
                Some(_) => false,
            };
            if ends_param {
                let mut param = &toks[start..i];
                if let [Tok::Ident(_), Tok::Punct(":"), rest @ ..] = param {
                    param = rest;
                }
                if !param.is_empty() {
                    params.push(parse_type(param)?);
                }
                start = i + 1;
            }
        }
        Ok(params)
    }

    pub fn parse_type(toks: &[Tok]) -> Result<Type, String> {
        let mut p = Parser {
            toks: toks.to_vec(),
            pos: 0,
        };
        let ty = type_at(&mut p)?;
        if p.pos != p.toks.len() {
            return Err(format!("unexpected {:?} in a type", &p.toks[p.pos..]));
        }
        Ok(ty)
    }

    fn type_at(p: &mut Parser) -> Result<Type, String> {
        match p.next()? {
            Tok::Punct("*") => {
                let is_const = match p.ident()?.as_str() {
                    "const" => true,
                    "mut" => false,
                    other => return Err(format!("expected const or mut after *, found {}", other)),
                };
                Ok(Type::Ptr {
                    is_const,
                    to: Box::new(type_at(p)?),
                })
            }
            Tok::Punct("[") => {
                let of = type_at(p)?;
                p.expect(";")?;
                let len = match p.next()? {
                    Tok::Num(n) => n,
                    other => return Err(format!("expected an array length, found {:?}", other)),
                };
                p.expect("]")?;
                Ok(Type::Array { of: Box::new(of), len })
            }
            Tok::Punct("&") => match p.ident()?.as_str() {
                "str" => Ok(Type::Str),
                other => Err(format!("a reference to {} cannot cross the ABI", other)),
            },
            Tok::Ident(word) if word == "Option" => {
                p.expect("<")?;
                let ty = type_at(p)?;
                if p.is(",") {
                    p.pos += 1; // rustfmt's trailing comma
                }
                p.expect(">")?;
                match ty {
                    Type::Fn { .. } => Ok(ty),
                    other => Err(format!(
                        "Option of {:?}: only function pointers are nullable here",
                        other
                    )),
                }
            }
            Tok::Ident(word) if word == "unsafe" || word == "extern" || word == "fn" => {
                let mut word = word;
                if word == "unsafe" {
                    word = p.ident()?;
                }
                if word == "extern" {
                    match p.next()? {
                        Tok::Str(abi) if abi == "\"C\"" => {}
                        other => return Err(format!("expected extern \"C\", found {:?}", other)),
                    }
                    word = p.ident()?;
                }
                if word != "fn" {
                    return Err(format!("expected fn, found {}", word));
                }
                p.expect("(")?;
                let params = parse_params(&p.until(&[")"])?)?;
                p.expect(")")?;
                let ret = if p.is("->") {
                    p.pos += 1;
                    Some(Box::new(type_at(p)?))
                } else {
                    None
                };
                Ok(Type::Fn { params, ret })
            }
            Tok::Ident(mut word) => {
                while p.is("::") {
                    p.pos += 1;
                    word = p.ident()?;
                }
                if p.is("<") {
                    p.pos += 1;
                    p.until(&[">"])?;
                    p.expect(">")?;
                    return Ok(Type::Other(word));
                }
                Ok(Type::Named(word))
            }
            other => Err(format!("unexpected {:?} in a type", other)),
        }
    }

    pub fn parse(src: &str) -> Result<Decls, String> {
        Parser {
            toks: tokenize(src)?,
            pos: 0,
        }
        .items()
    }
}

/// The C file that states each Rust declaration, one labelled line at a time.
mod c_check {
    use super::rust::{Decls, Tok, Type};
    use super::StructLayout;
    use std::collections::BTreeSet;

    struct Writer {
        lines: Vec<(String, String)>,
        /// Rust structs that are C struct tags rather than typedef names (CUstream_st).
        tags: BTreeSet<String>,
        typedefs: usize,
    }

    impl Writer {
        fn line(&mut self, code: String, label: &str) {
            self.lines.push((code, label.to_string()));
        }

        /// A C type to which a declarator can be appended; arrays and function pointers become
        /// typedefs of their own, written before the line that needs them under the same label.
        fn ctype(&mut self, ty: &Type, label: &str) -> Result<String, String> {
            Ok(match ty {
                Type::Named(name) => match name.as_str() {
                    "i8" => "int8_t".into(),
                    "u8" => "uint8_t".into(),
                    "i16" => "int16_t".into(),
                    "u16" => "uint16_t".into(),
                    "i32" => "int32_t".into(),
                    "u32" => "uint32_t".into(),
                    "i64" => "int64_t".into(),
                    "u64" => "uint64_t".into(),
                    "usize" => "size_t".into(),
                    "isize" => "ptrdiff_t".into(),
                    "f32" => "float".into(),
                    "f64" => "double".into(),
                    "bool" => "bool".into(),
                    "c_char" => "char".into(),
                    "c_void" => "void".into(),
                    _ if self.tags.contains(name) => format!("struct {}", name),
                    _ => name.clone(),
                },
                Type::Ptr { is_const, to } => {
                    format!("{} {}*", self.ctype(to, label)?, if *is_const { "const " } else { "" })
                }
                Type::Array { of, len } => {
                    let of = self.ctype(of, label)?;
                    let name = self.new_typedef();
                    self.line(format!("typedef {} {}[{}];", of, name, len.replace('_', "")), label);
                    name
                }
                Type::Fn { params, ret } => {
                    let ret = match ret {
                        Some(ret) => self.ctype(ret, label)?,
                        None => "void".into(),
                    };
                    let params = self.params(params, label)?;
                    let name = self.new_typedef();
                    self.line(format!("typedef {} (*{})({});", ret, name, params), label);
                    name
                }
                Type::Str => return Err(format!("{}: &str is not a C type", label)),
                Type::Other(name) => return Err(format!("{}: {}<...> is not a C type", label, name)),
            })
        }

        fn params(&mut self, params: &[Type], label: &str) -> Result<String, String> {
            if params.is_empty() {
                return Ok("void".into());
            }
            let mut out = Vec::new();
            for p in params {
                out.push(self.ctype(p, label)?);
            }
            Ok(out.join(", "))
        }

        fn new_typedef(&mut self) -> String {
            self.typedefs += 1;
            format!("rust_type_{}", self.typedefs)
        }
    }

    /// A Rust constant expression as C: literals without `_` or type suffixes, `x as T` as a cast.
    fn c_value(w: &mut Writer, value: &[Tok], label: &str) -> Result<String, String> {
        if let Some(at) = value.iter().position(|t| *t == Tok::Ident("as".into())) {
            let ty = super::rust::parse_type(&value[at + 1..])?;
            let inner = c_value(w, &value[..at], label)?;
            return Ok(format!("(({})({}))", w.ctype(&ty, label)?, inner));
        }
        let mut out = String::new();
        for tok in value {
            match tok {
                Tok::Num(n) => {
                    let mut n = n.replace('_', "");
                    for suffix in ["usize", "isize", "u8", "u16", "u32", "u64", "i8", "i16", "i32", "i64"] {
                        if n.len() > suffix.len() && n.ends_with(suffix) {
                            n.truncate(n.len() - suffix.len());
                            break;
                        }
                    }
                    out.push_str(&n);
                }
                Tok::Punct(p) => out.push_str(p),
                Tok::Ident(name) if name.starts_with("GPUMEM_") => out.push_str(name),
                other => return Err(format!("{}: cannot write {:?} as C", label, other)),
            }
            out.push(' ');
        }
        // `<` `<` were read as two tokens.
        Ok(out.trim_end().replace("< <", "<<").replace("> >", ">>"))
    }

    pub fn source(decls: &Decls, layouts: &[StructLayout]) -> Result<Vec<(String, String)>, String> {
        let tags = decls
            .structs
            .iter()
            .filter(|s| !s.name.ends_with("_t"))
            .map(|s| s.name.clone())
            .collect();
        let mut w = Writer {
            lines: Vec::new(),
            tags,
            typedefs: 0,
        };
        w.line("#include <gpumem/gpumem.h>".into(), "the headers");
        w.line("#include <stddef.h>".into(), "the headers");

        for alias in &decls.aliases {
            let label = format!("type {}", alias.name);
            let rust = w.ctype(&alias.ty, &label)?;
            // Through pointers, so that only the same type passes (not one that merely converts).
            w.line(
                format!(
                    "void check_type_{0}({0} *c, {1} *r) {{ {1} *a = c; {0} *b = r; (void)a; (void)b; }}",
                    alias.name, rust
                ),
                &label,
            );
        }

        for s in decls.structs.iter().filter(|s| s.opaque()) {
            if !w.tags.contains(&s.name) {
                let label = format!("type {}", s.name);
                w.line(format!("void check_opaque_{0}({0} *p) {{ (void)p; }}", s.name), &label);
            }
        }

        for c in &decls.consts {
            let label = format!("constant {}", c.name);
            match c.ty {
                Type::Str => {
                    let literal = match c.value.as_slice() {
                        [Tok::Str(s)] => s.clone(),
                        _ => return Err(format!("{}: not a string literal", label)),
                    };
                    // C cannot compare strings at compile time; the length is checked here and the
                    // text against the version numbers by the test.
                    w.line(
                        format!(
                            "_Static_assert(sizeof({}) == sizeof({}), \"{}\");",
                            c.name, literal, c.name
                        ),
                        &label,
                    );
                }
                _ => {
                    let value = c_value(&mut w, &c.value, &label)?;
                    w.line(
                        format!("_Static_assert(({}) == ({}), \"{}\");", c.name, value, c.name),
                        &label,
                    );
                }
            }
        }

        for s in decls.structs.iter().filter(|s| !s.opaque()) {
            let layout = match layouts.iter().find(|l| l.name == s.name) {
                Some(layout) => layout,
                None => continue, // reported by coverage
            };
            let label = format!("struct {}", s.name);
            let t = &s.name;
            w.line(
                format!("_Static_assert(sizeof({0}) == {1}, \"sizeof {0}\");", t, layout.size),
                &label,
            );
            w.line(
                format!(
                    "_Static_assert(_Alignof({0}) == {1}, \"_Alignof {0}\");",
                    t, layout.align
                ),
                &label,
            );
            for f in &layout.fields {
                let label = format!("field {}.{}", t, f.name);
                w.line(
                    format!(
                        "_Static_assert(offsetof({0}, {1}) == {2}, \"offsetof {0}.{1}\");",
                        t, f.name, f.offset
                    ),
                    &label,
                );
                w.line(
                    format!(
                        "_Static_assert(sizeof((({0} *)0)->{1}) == {2}, \"sizeof {0}.{1}\");",
                        t, f.name, f.size
                    ),
                    &label,
                );
            }
            w.line(format!("void check_struct_{0}({0} *s) {{", t), &label);
            for f in &s.fields {
                let label = format!("field {}.{}", t, f.name);
                let ty = w.ctype(&f.ty, &label)?;
                w.line(format!("  {0} *f_{1} = &s->{1}; (void)f_{1};", ty, f.name), &label);
            }
            w.line("}".into(), &label);
        }

        for f in &decls.fns {
            let label = format!("function {}", f.name);
            let ret = match &f.ret {
                Some(ret) => w.ctype(ret, &label)?,
                None => "void".into(),
            };
            let params = w.params(&f.params, &label)?;
            w.line(
                format!(
                    "typedef {} rust_fn_{}({}); rust_fn_{1} *const check_{1} = {1};",
                    ret, f.name, params
                ),
                &label,
            );
        }
        Ok(w.lines)
    }
}

/// What the headers declare, read from their text: enumerators and macros, typedef names, and
/// the fields of each struct typedef.
mod c_header {
    use std::collections::{BTreeMap, BTreeSet};
    use std::fs;
    use std::path::PathBuf;

    #[derive(Default)]
    pub struct Header {
        pub constants: BTreeSet<String>,
        pub typedefs: BTreeSet<String>,
        pub struct_fields: BTreeMap<String, Vec<String>>,
    }

    fn strip_comments(text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while !rest.is_empty() {
            if rest.starts_with("/*") {
                let end = rest.find("*/").map_or(rest.len(), |e| e + 2);
                out.push(' ');
                rest = &rest[end..];
            } else if rest.starts_with("//") {
                rest = &rest[rest.find('\n').unwrap_or(rest.len())..];
            } else if rest.starts_with('"') {
                let end = rest[1..].find('"').map_or(rest.len(), |e| e + 2);
                out.push_str(&rest[..end]);
                rest = &rest[end..];
            } else {
                let c = rest.chars().next().unwrap_or(' ');
                out.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
        out
    }

    fn tokens(code: &str) -> Vec<String> {
        let mut toks = Vec::new();
        let mut rest = code;
        while let Some(c) = rest.chars().next() {
            if c.is_whitespace() {
                rest = &rest[c.len_utf8()..];
            } else if c.is_ascii_alphanumeric() || c == '_' {
                let end = rest
                    .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
                    .unwrap_or(rest.len());
                toks.push(rest[..end].to_string());
                rest = &rest[end..];
            } else {
                toks.push(c.to_string());
                rest = &rest[c.len_utf8()..];
            }
        }
        toks
    }

    fn is_ident(tok: &str) -> bool {
        tok.chars()
            .next()
            .map_or(false, |c| c.is_ascii_alphabetic() || c == '_')
    }

    pub fn scan(paths: &[PathBuf]) -> Header {
        let mut header = Header::default();
        for path in paths {
            let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {}", path.display(), e));
            let text = strip_comments(&text).replace("\\\n", " ");
            let mut code = String::new();
            for line in text.lines() {
                let trimmed = line.trim_start();
                if let Some(directive) = trimmed.strip_prefix('#') {
                    let words: Vec<&str> = directive.split_whitespace().collect();
                    if let ["define", name, ..] = words.as_slice() {
                        let name = name.split('(').next().unwrap_or(name);
                        // Include guards, the export macro and the brace initializers are not values.
                        if name.starts_with("GPUMEM_")
                            && !name.ends_with("_H")
                            && !name.ends_with("_INIT")
                            && name != "GPUMEM_API"
                        {
                            header.constants.insert(name.to_string());
                        }
                    }
                } else {
                    code.push_str(line);
                    code.push('\n');
                }
            }
            scan_code(&tokens(&code), &mut header);
        }
        header
    }

    fn scan_code(toks: &[String], header: &mut Header) {
        let mut i = 0;
        while i < toks.len() {
            if toks[i] == "enum" {
                let open = match toks[i..].iter().position(|t| t == "{") {
                    Some(o) => i + o,
                    None => break,
                };
                let close = open + toks[open..].iter().position(|t| t == "}").unwrap_or(toks.len() - open);
                let mut expect_name = true;
                let mut depth = 0;
                for tok in &toks[open + 1..close] {
                    match tok.as_str() {
                        "(" => depth += 1,
                        ")" => depth -= 1,
                        "," if depth == 0 => expect_name = true,
                        name if expect_name && is_ident(name) => {
                            header.constants.insert(name.to_string());
                            expect_name = false;
                        }
                        _ => {}
                    }
                }
                i = close + 1;
            } else if toks[i] == "typedef" {
                let mut depth = 0;
                let mut end = i;
                while end < toks.len() {
                    match toks[end].as_str() {
                        "{" => depth += 1,
                        "}" => depth -= 1,
                        ";" if depth == 0 => break,
                        _ => {}
                    }
                    end += 1;
                }
                let decl = &toks[i + 1..end];
                typedef(decl, header);
                i = end + 1;
            } else {
                i += 1;
            }
        }
    }

    fn typedef(decl: &[String], header: &mut Header) {
        if let Some(open) = decl.iter().position(|t| t == "{") {
            let close = decl.iter().rposition(|t| t == "}").unwrap_or(decl.len());
            let name = match decl[close..].iter().rev().find(|t| is_ident(t)) {
                Some(name) => name.clone(),
                None => return,
            };
            let mut fields = Vec::new();
            for field in decl[open + 1..close].split(|t| t == ";").filter(|f| !f.is_empty()) {
                let before_array = field.iter().position(|t| t == "[").unwrap_or(field.len());
                if let Some(name) = field[..before_array].iter().rev().find(|t| is_ident(t)) {
                    fields.push(name.clone());
                }
            }
            header.typedefs.insert(name.clone());
            header.struct_fields.insert(name, fields);
            return;
        }
        // A function pointer: `ret (*name)(params)`.
        if let Some(star) = decl.windows(2).position(|w| w[0] == "(" && w[1] == "*") {
            if let Some(name) = decl.get(star + 2) {
                header.typedefs.insert(name.clone());
                return;
            }
        }
        if let Some(name) = decl.iter().rev().find(|t| is_ident(t)) {
            header.typedefs.insert(name.clone());
        }
    }
}
