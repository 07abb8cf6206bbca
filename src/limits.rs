//! What a decoder accepts, checked before the decoder runs.
//!
//! Every YAML or JSON input picolet decodes (manifests, its configuration file, and later
//! apiserver responses and kubeconfig files) first passes [`check`]: one linear pass over the
//! bytes that measures nesting depth, document count, scalar length and node count, and refuses
//! the input as soon as one exceeds its [`Limits`]. Files are read with [`read_file`], which
//! refuses anything but a regular file of bounded size without blocking.
//!
//! Why a pass of its own: the YAML parser's cost grows with the square of the flow nesting
//! depth (each token looks at every open `[` or `{` level), and its memory with the number of
//! nodes, aliases included as they expand. The pass follows the YAML scanner's own tokenizing
//! rules (indentation, simple keys, plain, quoted and block scalars), so what it measures is an
//! upper bound of what the parser will build: a deeper or larger document cannot slip past it
//! hidden in what the pass took for a string or a comment.
//!
//! Counting rules (the figures are upper bounds, never below the parsed document's):
//! - depth: sequences and mappings open at once, flow and block alike, including the implicit
//!   single-pair mappings of `[a: b]`;
//! - nodes: every scalar and collection, every indicator that may stand for an empty node
//!   (`-`, `?`, `:`, `,`, a closing bracket; `:` counts twice inside brackets), every anchor,
//!   each document's root, and each alias as the number of nodes its anchor covers;
//! - scalar length: bytes of input from the scalar's first to its last character;
//! - documents: explicit (`---`) and implicit ones.

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Bounds on one input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest input, in bytes.
    pub max_bytes: u64,
    /// Deepest nesting of sequences and mappings (JSON arrays and objects).
    pub max_depth: usize,
    /// Most YAML documents in one input, empty ones included.
    pub max_documents: usize,
    /// Longest scalar, in bytes of input.
    pub max_scalar_bytes: usize,
    /// Most nodes, counted as the module documentation says.
    pub max_nodes: usize,
}

impl Limits {
    /// Static pod manifests. 10 MB is upstream's file limit. A Pod nests about 12 levels at its
    /// deepest (affinity terms). 100,000 counted nodes is about 60,000 real ones, a pod with
    /// hundreds of containers; it caps the parser at about 25 MiB of memory.
    pub const MANIFEST: Limits = Limits {
        max_bytes: 10 * 1024 * 1024,
        max_depth: 64,
        max_documents: 16,
        max_scalar_bytes: 1024 * 1024,
        max_nodes: 100_000,
    };

    /// picolet's own configuration files (KubeletConfiguration; kubeconfig files later): small
    /// documents, with room for embedded certificates.
    pub const CONFIG: Limits = Limits {
        max_bytes: 1024 * 1024,
        max_depth: 64,
        max_documents: 16,
        max_scalar_bytes: 256 * 1024,
        max_nodes: 20_000,
    };

    /// apiserver responses (JSON) about this node: its Node, Lease, and the pods bound to it (a
    /// list of 110 pods with their managed fields is a few MB). A ConfigMap or Secret value is
    /// at most 1 MiB, 1.4 MB as base64.
    pub const API: Limits = Limits {
        max_bytes: 32 * 1024 * 1024,
        max_depth: 64,
        max_documents: 1,
        max_scalar_bytes: 2 * 1024 * 1024,
        max_nodes: 1_000_000,
    };
}

/// The input's syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    Yaml,
    Json,
}

/// What [`check`] measured (upper bounds, as the module documentation defines them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Shape {
    pub depth: usize,
    pub documents: usize,
    pub nodes: usize,
    pub longest_scalar: usize,
}

/// An input refused before parsing. Lines and columns are 1-based.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("refused: larger than the limit of {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("refused: not valid UTF-8 at line {line} column {column}")]
    NotUtf8 { line: usize, column: usize },
    #[error(
        "refused: nested deeper than the limit of {limit} levels at line {line} column {column}"
    )]
    TooDeep {
        limit: usize,
        line: usize,
        column: usize,
    },
    #[error("refused: more than the limit of {limit} documents at line {line}")]
    TooManyDocuments { limit: usize, line: usize },
    #[error(
        "refused: a scalar longer than the limit of {limit} bytes at line {line} column {column}"
    )]
    ScalarTooLong {
        limit: usize,
        line: usize,
        column: usize,
    },
    #[error("refused: more than the limit of {limit} nodes at line {line} column {column}")]
    TooManyNodes {
        limit: usize,
        line: usize,
        column: usize,
    },
}

/// Checks `bytes` against `limits` without parsing them: linear time, memory bounded by the
/// limits. The input must be UTF-8 (a leading byte order mark is allowed).
pub fn check(bytes: &[u8], syntax: Syntax, limits: &Limits) -> Result<Shape, LimitError> {
    if bytes.len() as u64 > limits.max_bytes {
        return Err(LimitError::TooLarge {
            limit: limits.max_bytes,
        });
    }
    if let Err(e) = std::str::from_utf8(bytes) {
        let (line, column) = line_column(bytes, e.valid_up_to());
        return Err(LimitError::NotUtf8 { line, column });
    }
    match syntax {
        Syntax::Json => json(bytes, limits),
        Syntax::Yaml => Yaml::new(bytes, limits).run(),
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn line_column(bytes: &[u8], offset: usize) -> (usize, usize) {
    let before = &bytes[..offset.min(bytes.len())];
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1);
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = before[line_start..]
        .iter()
        .filter(|&&b| b & 0xC0 != 0x80)
        .count()
        + 1;
    (line, column)
}

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("not a regular file: it is {0}")]
    NotRegular(&'static str),
    #[error("refused: larger than the limit of {limit} bytes")]
    TooLarge { limit: u64 },
}

/// Reads a whole regular file of at most `limits.max_bytes`. Never blocks on a FIFO or a
/// device: the file is opened non-blocking and its type checked on the open descriptor, so a
/// file swapped for something else between a look and the read is refused too.
pub fn read_file(path: &Path, limits: &Limits) -> Result<Vec<u8>, ReadError> {
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)?;
    let md = f.metadata()?;
    let ft = md.file_type();
    if !ft.is_file() {
        return Err(ReadError::NotRegular(if ft.is_dir() {
            "a directory"
        } else if ft.is_fifo() {
            "a named pipe (FIFO)"
        } else if ft.is_char_device() {
            "a character device"
        } else if ft.is_block_device() {
            "a block device"
        } else if ft.is_socket() {
            "a socket"
        } else {
            "not a file"
        }));
    }
    if md.len() > limits.max_bytes {
        return Err(ReadError::TooLarge {
            limit: limits.max_bytes,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(md.len()).unwrap_or(0));
    // The file may grow after the look: read one byte past the limit to notice.
    f.take(limits.max_bytes + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limits.max_bytes {
        return Err(ReadError::TooLarge {
            limit: limits.max_bytes,
        });
    }
    Ok(bytes)
}

// ---------------------------------------------------------------------------------------------
// JSON
// ---------------------------------------------------------------------------------------------

fn json(s: &[u8], lim: &Limits) -> Result<Shape, LimitError> {
    let mut shape = Shape {
        documents: 1,
        ..Shape::default()
    };
    let mut depth = 0usize;
    let mut i = if s.starts_with(b"\xEF\xBB\xBF") { 3 } else { 0 };
    let at = |i: usize| line_column(s, i);
    let node = |shape: &mut Shape, i: usize| {
        shape.nodes += 1;
        if shape.nodes > lim.max_nodes {
            let (line, column) = at(i);
            return Err(LimitError::TooManyNodes {
                limit: lim.max_nodes,
                line,
                column,
            });
        }
        Ok(())
    };
    let scalar = |shape: &mut Shape, start: usize, end: usize| {
        let len = end - start;
        shape.longest_scalar = shape.longest_scalar.max(len);
        if len > lim.max_scalar_bytes {
            let (line, column) = at(start);
            return Err(LimitError::ScalarTooLong {
                limit: lim.max_scalar_bytes,
                line,
                column,
            });
        }
        Ok(())
    };
    while i < s.len() {
        match s[i] {
            b' ' | b'\t' | b'\r' | b'\n' | b',' | b':' => i += 1,
            b'[' | b'{' => {
                depth += 1;
                shape.depth = shape.depth.max(depth);
                if depth > lim.max_depth {
                    let (line, column) = at(i);
                    return Err(LimitError::TooDeep {
                        limit: lim.max_depth,
                        line,
                        column,
                    });
                }
                node(&mut shape, i)?;
                i += 1;
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'"' => {
                let start = i;
                i += 1;
                while i < s.len() && s[i] != b'"' {
                    i += if s[i] == b'\\' { 2 } else { 1 };
                }
                i = (i + 1).min(s.len());
                node(&mut shape, start)?;
                scalar(&mut shape, start, i)?;
            }
            _ => {
                let start = i;
                while i < s.len()
                    && !matches!(
                        s[i],
                        b' ' | b'\t'
                            | b'\r'
                            | b'\n'
                            | b','
                            | b':'
                            | b'['
                            | b']'
                            | b'{'
                            | b'}'
                            | b'"'
                    )
                {
                    i += 1;
                }
                node(&mut shape, start)?;
                scalar(&mut shape, start, i)?;
            }
        }
    }
    Ok(shape)
}

// ---------------------------------------------------------------------------------------------
// YAML: the scanner's tokenizing rules, without building tokens
// ---------------------------------------------------------------------------------------------

/// Keys more than this many bytes before the `:` cannot be simple keys (the YAML scanner's
/// rule).
const SIMPLE_KEY_REACH: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockKind {
    Sequence,
    Mapping,
}

/// An open block collection.
#[derive(Debug, Clone, Copy)]
struct Block {
    indent: isize,
    kind: BlockKind,
    /// A mapping whose value at this indentation is an indentless sequence (`key:\n- a`).
    indentless: bool,
}

/// An open flow collection.
#[derive(Debug, Clone, Copy)]
struct Flow {
    sequence: bool,
    /// Inside a sequence, an entry that turned out to be a single-pair mapping (`[a: b]`).
    pair: bool,
    /// Deepest depth reached since the current entry began.
    entry_peak: usize,
    /// Deepest depth reached inside this collection.
    peak: usize,
}

/// A possible simple key: a token that becomes a mapping key if a `:` follows on its line.
#[derive(Debug, Clone, Copy, Default)]
struct SimpleKey {
    possible: bool,
    index: usize,
    line: usize,
    column: isize,
    /// Deepest depth reached since the key began (a block mapping starting at the key holds
    /// everything after it).
    peak: usize,
}

/// An anchor whose node may not have ended yet.
#[derive(Debug, Clone, Copy)]
struct OpenAnchor<'a> {
    name: &'a [u8],
    id: usize,
    nodes_at: usize,
    depth: usize,
    line: usize,
    /// Depth went above the anchor's since it was seen: back at its depth, its node ended.
    deeper: bool,
    /// No token since the anchor but properties: a scalar next on its line is its node.
    awaiting: bool,
    /// Deepest depth reached while it is open (anchors opened later pass theirs on as they
    /// close).
    peak: usize,
}

#[derive(Debug, Clone, Copy)]
enum Anchor {
    /// The node is still being read (the anchor is in `open`).
    Open { id: usize, nodes_at: usize },
    /// Its node's size in counted nodes, and how many levels it nests below the anchor.
    Closed { nodes: usize, levels: usize },
}

struct Yaml<'a> {
    s: &'a [u8],
    lim: &'a Limits,
    i: usize,
    line: usize,
    /// In characters, signed as the scanner's indentation (-1 before any collection).
    column: isize,
    flow: Vec<Flow>,
    blocks: Vec<Block>,
    simple_key_allowed: bool,
    /// One per flow level, plus the block level at index 0.
    keys: Vec<SimpleKey>,
    depth: usize,
    in_document: bool,
    shape: Shape,
    open: Vec<OpenAnchor<'a>>,
    anchors: HashMap<&'a [u8], Anchor>,
    next_anchor_id: usize,
}

/// The scanner gave up: the YAML parser would stop with a syntax error at or before this point,
/// so nothing after it is parsed and there is nothing more to measure.
struct SyntaxError;

enum Stop {
    Limit(LimitError),
    Syntax,
}

impl From<LimitError> for Stop {
    fn from(e: LimitError) -> Stop {
        Stop::Limit(e)
    }
}

impl From<SyntaxError> for Stop {
    fn from(_: SyntaxError) -> Stop {
        Stop::Syntax
    }
}

type Step = Result<(), Stop>;

impl<'a> Yaml<'a> {
    fn new(s: &'a [u8], lim: &'a Limits) -> Yaml<'a> {
        Yaml {
            s,
            lim,
            i: 0,
            line: 0,
            column: 0,
            flow: Vec::new(),
            blocks: Vec::new(),
            simple_key_allowed: true,
            keys: vec![SimpleKey::default()],
            depth: 0,
            in_document: false,
            shape: Shape::default(),
            open: Vec::new(),
            anchors: HashMap::new(),
            next_anchor_id: 0,
        }
    }

    fn run(mut self) -> Result<Shape, LimitError> {
        // The reader drops a byte order mark at the very start.
        if self.s.starts_with(b"\xEF\xBB\xBF") {
            self.i = 3;
        }
        loop {
            match self.token() {
                Ok(true) => continue,
                Ok(false) | Err(Stop::Syntax) => return Ok(self.shape),
                Err(Stop::Limit(e)) => return Err(e),
            }
        }
    }

    // -- characters ----------------------------------------------------------------------------

    fn at(&self, k: usize) -> u8 {
        self.s.get(self.i + k).copied().unwrap_or(0)
    }

    fn end(&self) -> bool {
        self.i >= self.s.len()
    }

    fn width(&self) -> usize {
        match self.at(0) {
            b if b < 0x80 => 1,
            b if b < 0xE0 => 2,
            b if b < 0xF0 => 3,
            _ => 4,
        }
    }

    fn is_break_at(&self, k: usize) -> bool {
        match self.at(k) {
            b'\r' | b'\n' => true,
            0xC2 => self.at(k + 1) == 0x85,
            0xE2 => self.at(k + 1) == 0x80 && matches!(self.at(k + 2), 0xA8 | 0xA9),
            _ => false,
        }
    }

    fn is_blank_at(&self, k: usize) -> bool {
        matches!(self.at(k), b' ' | b'\t')
    }

    fn is_z_at(&self, k: usize) -> bool {
        self.i + k >= self.s.len()
    }

    fn is_blankz_at(&self, k: usize) -> bool {
        self.is_blank_at(k) || self.is_break_at(k) || self.is_z_at(k)
    }

    fn is_breakz(&self) -> bool {
        self.is_break_at(0) || self.end()
    }

    fn is_alpha(&self) -> bool {
        matches!(self.at(0), b'0'..=b'9' | b'A'..=b'Z' | b'a'..=b'z' | b'_' | b'-')
    }

    fn skip(&mut self) {
        self.i += self.width();
        self.column += 1;
    }

    fn skip_line(&mut self) {
        if self.at(0) == b'\r' && self.at(1) == b'\n' {
            self.i += 2;
        } else {
            self.i += self.width();
        }
        self.column = 0;
        self.line += 1;
    }

    fn document_marker(&self) -> bool {
        self.column == 0
            && ((self.at(0) == b'-' && self.at(1) == b'-' && self.at(2) == b'-')
                || (self.at(0) == b'.' && self.at(1) == b'.' && self.at(2) == b'.'))
            && self.is_blankz_at(3)
    }

    // -- measurements --------------------------------------------------------------------------

    fn here(&self) -> (usize, usize) {
        (self.line + 1, usize::try_from(self.column).unwrap_or(0) + 1)
    }

    fn add_nodes(&mut self, n: usize) -> Result<(), LimitError> {
        self.shape.nodes = self.shape.nodes.saturating_add(n);
        if self.shape.nodes > self.lim.max_nodes {
            let (line, column) = self.here();
            return Err(LimitError::TooManyNodes {
                limit: self.lim.max_nodes,
                line,
                column,
            });
        }
        Ok(())
    }

    fn note_depth(&mut self, depth: usize) -> Result<(), LimitError> {
        self.shape.depth = self.shape.depth.max(depth);
        if depth > self.lim.max_depth {
            let (line, column) = self.here();
            return Err(LimitError::TooDeep {
                limit: self.lim.max_depth,
                line,
                column,
            });
        }
        Ok(())
    }

    fn scalar(&mut self, start: usize, end: usize, line: usize, column: isize) -> Step {
        let len = end.saturating_sub(start);
        self.shape.longest_scalar = self.shape.longest_scalar.max(len);
        if len > self.lim.max_scalar_bytes {
            return Err(LimitError::ScalarTooLong {
                limit: self.lim.max_scalar_bytes,
                line: line + 1,
                column: usize::try_from(column).unwrap_or(0) + 1,
            }
            .into());
        }
        self.add_nodes(1)?;
        self.anchor_node_on_line(line, 1);
        Ok(())
    }

    /// One level deeper. Records the peak in the innermost flow collection, or in the block
    /// level's simple key, for a collection later found to start before them.
    fn push_depth(&mut self) -> Result<(), LimitError> {
        for a in self.open.iter_mut().rev() {
            if a.depth != self.depth {
                break;
            }
            a.deeper = true;
            a.awaiting = false;
        }
        self.depth += 1;
        self.note_depth(self.depth)?;
        let d = self.depth;
        if let Some(a) = self.open.last_mut() {
            a.peak = a.peak.max(d);
        }
        match self.flow.last_mut() {
            Some(f) => {
                f.entry_peak = f.entry_peak.max(d);
                f.peak = f.peak.max(d);
            }
            None => {
                let k = &mut self.keys[0];
                if k.possible {
                    k.peak = k.peak.max(d);
                }
            }
        }
        Ok(())
    }

    fn pop_depth(&mut self) {
        self.depth = self.depth.saturating_sub(1);
        while let Some(a) = self.open.last().copied() {
            if a.depth > self.depth || (a.depth == self.depth && a.deeper) {
                self.open.pop();
                self.close_anchor(&a, self.shape.nodes.saturating_sub(a.nodes_at));
                if let Some(below) = self.open.last_mut() {
                    below.peak = below.peak.max(a.peak);
                }
            } else {
                break;
            }
        }
    }

    fn close_anchor(&mut self, a: &OpenAnchor<'a>, size: usize) {
        if let Some(v) = self.anchors.get_mut(a.name)
            && matches!(v, Anchor::Open { id, .. } if *id == a.id)
        {
            *v = Anchor::Closed {
                nodes: size.max(1),
                levels: a.peak.saturating_sub(a.depth),
            };
        }
    }

    /// A scalar or alias starting on the anchor's line right after it is the anchor's node.
    fn anchor_node_on_line(&mut self, line: usize, size: usize) {
        if let Some(a) = self.open.last().copied()
            && a.awaiting
            && a.line == line
            && a.depth == self.depth
        {
            self.open.pop();
            self.close_anchor(&a, size);
            if let Some(below) = self.open.last_mut() {
                below.peak = below.peak.max(a.peak);
            }
        }
        if let Some(a) = self.open.last_mut() {
            a.awaiting = false;
        }
    }

    fn forget_anchors(&mut self) {
        self.open.clear();
        self.anchors.clear();
    }

    // -- the scanner's state -------------------------------------------------------------------

    fn indent(&self) -> isize {
        self.blocks.last().map_or(-1, |b| b.indent)
    }

    fn flow_level(&self) -> usize {
        self.flow.len()
    }

    fn stale(&self, k: &SimpleKey) -> bool {
        k.line < self.line || k.index + SIMPLE_KEY_REACH < self.i
    }

    fn save_simple_key(&mut self) {
        if self.simple_key_allowed {
            let d = self.depth;
            let k = SimpleKey {
                possible: true,
                index: self.i,
                line: self.line,
                column: self.column,
                peak: d,
            };
            let level = self.flow_level();
            self.keys[level] = k;
        }
    }

    fn remove_simple_key(&mut self) {
        let level = self.flow_level();
        self.keys[level].possible = false;
    }

    /// A block collection starts at `column` if it is deeper than the current one. `peak` is
    /// the deepest depth already reached inside it (it may start before tokens already seen).
    fn roll(&mut self, column: isize, kind: BlockKind, peak: usize) -> Result<bool, LimitError> {
        if !self.flow.is_empty() || self.indent() >= column {
            return Ok(false);
        }
        self.blocks.push(Block {
            indent: column,
            kind,
            indentless: false,
        });
        self.push_depth()?;
        self.note_depth(peak + 1)?;
        self.add_nodes(1)?;
        Ok(true)
    }

    fn unroll(&mut self, column: isize) {
        if !self.flow.is_empty() {
            return;
        }
        while self.indent() > column {
            if let Some(b) = self.blocks.pop() {
                if b.indentless {
                    self.pop_depth();
                }
                self.pop_depth();
            }
        }
    }

    /// A key at the current indentation ends an indentless sequence there.
    fn key_at_indent(&mut self) {
        if let Some(b) = self.blocks.last_mut()
            && b.indentless
        {
            b.indentless = false;
            self.pop_depth();
        }
    }

    fn content(&mut self) -> Result<(), LimitError> {
        if !self.in_document {
            self.document()?;
        }
        Ok(())
    }

    fn document(&mut self) -> Result<(), LimitError> {
        self.in_document = true;
        self.shape.documents += 1;
        if self.shape.documents > self.lim.max_documents {
            return Err(LimitError::TooManyDocuments {
                limit: self.lim.max_documents,
                line: self.line + 1,
            });
        }
        self.forget_anchors();
        self.add_nodes(1)
    }

    // -- tokens --------------------------------------------------------------------------------

    fn skip_to_next_token(&mut self) {
        loop {
            if self.column == 0 && self.s[self.i.min(self.s.len())..].starts_with(b"\xEF\xBB\xBF") {
                self.skip();
            }
            while self.at(0) == b' '
                || ((!self.flow.is_empty() || !self.simple_key_allowed) && self.at(0) == b'\t')
            {
                self.skip();
            }
            if self.at(0) == b'#' {
                while !self.is_breakz() {
                    self.skip();
                }
            }
            if !self.is_break_at(0) {
                break;
            }
            self.skip_line();
            if self.flow.is_empty() {
                self.simple_key_allowed = true;
            }
        }
    }

    /// Scans one token; false at the end of the input.
    fn token(&mut self) -> Result<bool, Stop> {
        self.skip_to_next_token();
        let column = self.column;
        self.unroll(column);
        if self.end() {
            self.unroll(-1);
            return Ok(false);
        }
        let c = self.at(0);
        let flow = !self.flow.is_empty();
        if self.column == 0 && c == b'%' {
            self.unroll(-1);
            self.remove_simple_key();
            self.simple_key_allowed = false;
            while !self.is_breakz() {
                self.skip();
            }
            if self.is_break_at(0) {
                self.skip_line();
            }
            return Ok(true);
        }
        if self.document_marker() {
            self.unroll(-1);
            self.remove_simple_key();
            self.simple_key_allowed = false;
            if c == b'-' {
                self.document()?;
            } else {
                self.in_document = false;
                self.forget_anchors();
            }
            for _ in 0..3 {
                self.skip();
            }
            return Ok(true);
        }
        self.content()?;
        match c {
            b'[' | b'{' => {
                self.save_simple_key();
                self.flow.push(Flow {
                    sequence: c == b'[',
                    pair: false,
                    entry_peak: 0,
                    peak: 0,
                });
                self.keys.push(SimpleKey::default());
                self.push_depth()?;
                self.add_nodes(1)?;
                self.simple_key_allowed = true;
                self.skip();
            }
            b']' | b'}' => {
                self.remove_simple_key();
                self.end_pair();
                if let Some(f) = self.flow.pop() {
                    self.keys.pop();
                    self.pop_depth();
                    match self.flow.last_mut() {
                        Some(parent) => {
                            parent.entry_peak = parent.entry_peak.max(f.peak);
                            parent.peak = parent.peak.max(f.peak);
                        }
                        None => {
                            let k = &mut self.keys[0];
                            if k.possible {
                                k.peak = k.peak.max(f.peak);
                            }
                        }
                    }
                }
                self.add_nodes(1)?;
                self.simple_key_allowed = false;
                self.skip();
            }
            b',' => {
                self.remove_simple_key();
                self.end_pair();
                let d = self.depth;
                if let Some(f) = self.flow.last_mut() {
                    f.entry_peak = d;
                }
                self.add_nodes(1)?;
                self.simple_key_allowed = true;
                self.skip();
            }
            b'-' if self.is_blankz_at(1) => {
                if !flow {
                    let d = self.depth;
                    if !self.roll(column, BlockKind::Sequence, d)? {
                        self.indentless_entry()?;
                    }
                }
                self.remove_simple_key();
                self.simple_key_allowed = true;
                self.add_nodes(1)?;
                self.skip();
            }
            b'?' if flow || self.is_blankz_at(1) => {
                if !flow {
                    let d = self.depth;
                    if !self.roll(column, BlockKind::Mapping, d)? {
                        self.key_at_indent();
                    }
                } else {
                    self.begin_pair()?;
                }
                self.remove_simple_key();
                self.simple_key_allowed = !flow;
                self.add_nodes(1)?;
                self.skip();
            }
            b':' if flow || self.is_blankz_at(1) => self.value()?,
            b'*' => {
                self.save_simple_key();
                self.simple_key_allowed = false;
                self.skip();
                let start = self.i;
                while self.is_alpha() {
                    self.skip();
                }
                let name = &self.s[start..self.i];
                let (size, levels) = match self.anchors.get(name) {
                    Some(Anchor::Closed { nodes, levels }) => (*nodes, *levels),
                    // An alias inside its own anchor's node: bounded by all seen so far.
                    Some(Anchor::Open { nodes_at, .. }) => (
                        self.shape.nodes.saturating_sub(*nodes_at).max(1),
                        self.shape.depth,
                    ),
                    None => (1, 0),
                };
                self.note_depth(self.depth.saturating_add(levels))?;
                self.add_nodes(size)?;
                let line = self.line;
                self.anchor_node_on_line(line, size);
            }
            b'&' => {
                self.save_simple_key();
                self.simple_key_allowed = false;
                self.skip();
                let start = self.i;
                while self.is_alpha() {
                    self.skip();
                }
                let id = self.next_anchor_id;
                self.next_anchor_id += 1;
                let nodes_at = self.shape.nodes;
                self.add_nodes(1)?;
                let name = &self.s[start..self.i];
                self.open.push(OpenAnchor {
                    name,
                    id,
                    nodes_at,
                    depth: self.depth,
                    line: self.line,
                    deeper: false,
                    awaiting: true,
                    peak: self.depth,
                });
                self.anchors.insert(name, Anchor::Open { id, nodes_at });
            }
            b'!' => {
                self.save_simple_key();
                self.simple_key_allowed = false;
                if self.at(1) == b'<' {
                    while !self.is_blankz_at(0) && self.at(0) != b'>' {
                        self.skip();
                    }
                    if self.at(0) == b'>' {
                        self.skip();
                    }
                } else {
                    self.skip();
                    while self.is_alpha()
                        || matches!(
                            self.at(0),
                            b';' | b'/'
                                | b'?'
                                | b':'
                                | b'@'
                                | b'&'
                                | b'='
                                | b'+'
                                | b'$'
                                | b'.'
                                | b'%'
                                | b'!'
                                | b'~'
                                | b'*'
                                | b'\''
                                | b'('
                                | b')'
                        )
                    {
                        self.skip();
                    }
                }
            }
            b'|' | b'>' if !flow => self.block_scalar()?,
            b'\'' | b'"' => self.quoted_scalar(c == b'\'')?,
            _ => {
                let starts_plain = !(self.is_blankz_at(0)
                    || matches!(
                        c,
                        b'-' | b'?'
                            | b':'
                            | b','
                            | b'['
                            | b']'
                            | b'{'
                            | b'}'
                            | b'#'
                            | b'&'
                            | b'*'
                            | b'!'
                            | b'|'
                            | b'>'
                            | b'\''
                            | b'"'
                            | b'%'
                            | b'@'
                            | b'`'
                    ))
                    || (c == b'-' && !self.is_blank_at(1))
                    || (!flow && matches!(c, b'?' | b':') && !self.is_blankz_at(1));
                if !starts_plain {
                    return Err(SyntaxError.into());
                }
                self.plain_scalar()?;
            }
        }
        Ok(true)
    }

    /// `-` at the current indentation under a mapping: an indentless sequence begins.
    fn indentless_entry(&mut self) -> Result<(), LimitError> {
        let starts = matches!(
            self.blocks.last(),
            Some(b) if b.kind == BlockKind::Mapping && !b.indentless
        );
        if starts {
            if let Some(b) = self.blocks.last_mut() {
                b.indentless = true;
            }
            self.push_depth()?;
            self.add_nodes(1)?;
        }
        Ok(())
    }

    /// Inside a flow sequence, `?` or `:` makes the entry a single-pair mapping.
    fn begin_pair(&mut self) -> Result<(), LimitError> {
        let Some(f) = self.flow.last().copied() else {
            return Ok(());
        };
        if f.sequence && !f.pair {
            let peak = f.entry_peak;
            if let Some(f) = self.flow.last_mut() {
                f.pair = true;
            }
            self.push_depth()?;
            self.note_depth(peak + 1)?;
        }
        Ok(())
    }

    fn end_pair(&mut self) {
        if let Some(f) = self.flow.last_mut()
            && f.pair
        {
            f.pair = false;
            self.pop_depth();
        }
    }

    fn value(&mut self) -> Step {
        let level = self.flow_level();
        let k = self.keys[level];
        let flow = level > 0;
        if flow {
            self.begin_pair()?;
        }
        if k.possible && !self.stale(&k) {
            if !flow && !self.roll(k.column, BlockKind::Mapping, k.peak)? {
                self.key_at_indent();
            }
            self.keys[level].possible = false;
            self.simple_key_allowed = false;
        } else {
            if !flow {
                let column = self.column;
                let d = self.depth;
                if !self.roll(column, BlockKind::Mapping, d)? {
                    self.key_at_indent();
                }
            }
            self.simple_key_allowed = !flow;
        }
        self.add_nodes(if flow { 2 } else { 1 })?;
        self.skip();
        Ok(())
    }

    fn quoted_scalar(&mut self, single: bool) -> Step {
        self.save_simple_key();
        self.simple_key_allowed = false;
        let (start, line, column) = (self.i, self.line, self.column);
        self.skip();
        loop {
            if self.document_marker() || self.end() {
                return Err(SyntaxError.into());
            }
            match self.at(0) {
                b'\'' if single && self.at(1) == b'\'' => {
                    self.skip();
                    self.skip();
                }
                b'\'' if single => break,
                b'"' if !single => break,
                b'\\' if !single => {
                    self.skip();
                    if self.is_break_at(0) {
                        self.skip_line();
                    } else if !self.end() {
                        self.skip();
                    }
                }
                _ if self.is_break_at(0) => self.skip_line(),
                _ => self.skip(),
            }
        }
        self.skip();
        self.scalar(start, self.i, line, column)
    }

    fn plain_scalar(&mut self) -> Step {
        self.save_simple_key();
        self.simple_key_allowed = false;
        let flow = !self.flow.is_empty();
        let indent = self.indent() + 1;
        let (start, line, column) = (self.i, self.line, self.column);
        let mut end = self.i;
        let mut leading_blanks = false;
        loop {
            if self.document_marker() || self.at(0) == b'#' {
                break;
            }
            while !self.is_blankz_at(0) {
                let c = self.at(0);
                if flow
                    && c == b':'
                    && matches!(self.at(1), b',' | b'?' | b'[' | b']' | b'{' | b'}')
                {
                    return Err(SyntaxError.into());
                }
                if (c == b':' && self.is_blankz_at(1))
                    || (flow && matches!(c, b',' | b'[' | b']' | b'{' | b'}'))
                {
                    break;
                }
                self.skip();
                end = self.i;
            }
            if !(self.is_blank_at(0) || self.is_break_at(0)) {
                break;
            }
            while self.is_blank_at(0) || self.is_break_at(0) {
                if self.is_blank_at(0) {
                    if leading_blanks && (self.column) < indent && self.at(0) == b'\t' {
                        return Err(SyntaxError.into());
                    }
                    self.skip();
                } else {
                    self.skip_line();
                    leading_blanks = true;
                }
            }
            if !flow && (self.column) < indent {
                break;
            }
        }
        if leading_blanks {
            self.simple_key_allowed = true;
        }
        self.scalar(start, end, line, column)
    }

    fn block_scalar(&mut self) -> Step {
        self.remove_simple_key();
        self.simple_key_allowed = true;
        let (start, line, column) = (self.i, self.line, self.column);
        self.skip();
        let mut increment = 0isize;
        let digit = |c: u8| matches!(c, b'1'..=b'9');
        if matches!(self.at(0), b'+' | b'-') {
            self.skip();
            if digit(self.at(0)) {
                increment = isize::from(self.at(0) - b'0');
                self.skip();
            } else if self.at(0) == b'0' {
                return Err(SyntaxError.into());
            }
        } else if digit(self.at(0)) {
            increment = isize::from(self.at(0) - b'0');
            self.skip();
            if matches!(self.at(0), b'+' | b'-') {
                self.skip();
            }
        } else if self.at(0) == b'0' {
            return Err(SyntaxError.into());
        }
        while self.is_blank_at(0) {
            self.skip();
        }
        if self.at(0) == b'#' {
            while !self.is_breakz() {
                self.skip();
            }
        }
        if !self.is_breakz() {
            return Err(SyntaxError.into());
        }
        if self.is_break_at(0) {
            self.skip_line();
        }
        let mut indent = if increment != 0 {
            if self.indent() >= 0 {
                self.indent() + increment
            } else {
                increment
            }
        } else {
            0
        };
        self.block_scalar_breaks(&mut indent)?;
        let mut end = self.i;
        while self.column == indent && !self.end() {
            while !self.is_breakz() {
                self.skip();
            }
            end = self.i;
            if self.is_break_at(0) {
                self.skip_line();
            }
            self.block_scalar_breaks(&mut indent)?;
        }
        self.scalar(start, end, line, column)
    }

    fn block_scalar_breaks(&mut self, indent: &mut isize) -> Result<(), SyntaxError> {
        let mut max_indent = 0isize;
        loop {
            while (*indent == 0 || (self.column) < *indent) && self.at(0) == b' ' {
                self.skip();
            }
            max_indent = max_indent.max(self.column);
            if (*indent == 0 || (self.column) < *indent) && self.at(0) == b'\t' {
                return Err(SyntaxError);
            }
            if !self.is_break_at(0) {
                break;
            }
            self.skip_line();
        }
        if *indent == 0 {
            *indent = max_indent.max(self.indent() + 1).max(1);
        }
        Ok(())
    }
}

impl fmt::Display for Syntax {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Syntax::Yaml => "yaml",
            Syntax::Json => "json",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: Limits = Limits::MANIFEST;

    fn yaml(s: &str) -> Result<Shape, LimitError> {
        check(s.as_bytes(), Syntax::Yaml, &M)
    }

    /// A limit so high nothing is refused: the measurement itself.
    fn measure(s: &str) -> Shape {
        let all = Limits {
            max_bytes: u64::MAX,
            max_depth: usize::MAX / 2,
            max_documents: usize::MAX,
            max_scalar_bytes: usize::MAX,
            max_nodes: usize::MAX,
        };
        check(s.as_bytes(), Syntax::Yaml, &all).unwrap()
    }

    /// Depth and node count of what the YAML parser makes of `s` (all documents).
    fn parsed(s: &str) -> (usize, usize) {
        fn walk(v: &yaml_serde::Value, depth: usize) -> (usize, usize) {
            use yaml_serde::Value;
            match v {
                Value::Sequence(items) => items.iter().fold((depth + 1, 1), |(d, n), v| {
                    let (d2, n2) = walk(v, depth + 1);
                    (d.max(d2), n + n2)
                }),
                Value::Mapping(m) => m.iter().fold((depth + 1, 1), |(d, n), (k, v)| {
                    let (dk, nk) = walk(k, depth + 1);
                    let (dv, nv) = walk(v, depth + 1);
                    (d.max(dk).max(dv), n + nk + nv)
                }),
                Value::Tagged(t) => walk(&t.value, depth),
                _ => (depth, 1),
            }
        }
        yaml_serde::Deserializer::from_str(s)
            .map(|doc| {
                let v = <yaml_serde::Value as serde::Deserialize>::deserialize(doc)
                    .unwrap_or_else(|e| panic!("{s:?} does not parse: {e}"));
                walk(&v, 0)
            })
            .fold((0, 0), |(d, n), (d2, n2)| (d.max(d2), n + n2))
    }

    /// The measurement is an upper bound of what the parser makes, and not far above it.
    fn bounds(s: &str) {
        let shape = measure(s);
        let (depth, nodes) = parsed(s);
        assert!(
            shape.depth >= depth,
            "{s:?}: depth {} < {depth}",
            shape.depth
        );
        assert!(
            shape.nodes >= nodes,
            "{s:?}: nodes {} < {nodes}",
            shape.nodes
        );
        assert!(
            shape.depth <= depth + 1,
            "{s:?}: depth {} for {depth}",
            shape.depth
        );
    }

    const POD: &str = "\
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web, tier: \"front\"}
  annotations:
    note: it's [not] a {flow} # comment [
spec:
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - key: kubernetes.io/arch
            operator: In
            values: [arm64, amd64]
  containers:
  - name: web
    image: nginx:1.27
    command: [\"sh\", \"-c\", 'echo \"[\" && exec nginx']
    args:
    - |
      if [ -f /x ]; then echo '['; fi
      {{ not a template
    - >-
      folded \"text
      [more
    env:
    - name: A
      value: \"1\"
    resources:
      limits: {cpu: 500m, memory: 128Mi}
";

    #[test]
    fn a_real_pod_is_measured_exactly() {
        bounds(POD);
        let s = yaml(POD).unwrap();
        // root > spec > affinity > nodeAffinity > required > terms > [0] > exprs > [0] > values
        assert_eq!(s.depth, 10);
        assert_eq!(s.documents, 1);
        let (_, nodes) = parsed(POD);
        assert!(s.nodes < nodes * 2, "{} counted for {nodes}", s.nodes);
    }

    #[test]
    fn the_examples_and_test_manifests_are_measured_as_parsed() {
        for f in [
            "examples/counter.yaml",
            "examples/web.yaml",
            "examples/env-demo.json",
        ] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(f);
            let s = fs::read_to_string(&path).unwrap();
            bounds(&s);
            assert!(yaml(&s).is_ok(), "{f}");
            if f.ends_with(".json") {
                let j = check(s.as_bytes(), Syntax::Json, &M).unwrap();
                assert_eq!(j.depth, measure(&s).depth, "{f}");
            }
        }
    }

    #[test]
    fn tricky_yaml_is_bounded() {
        for s in [
            "a: b\n",
            "- a\n- b\n",
            "a:\n- 1\n- [2, 3]\nb: 4\n",
            "a:\n  - b:\n      - c\n  - d\n",
            "- - - a\n  - b\n- c\n",
            "? a\n: b\n? [c, d]\n: {e: f}\n",
            "[a: b, c: [d: e]]\n",
            "[[a]: b, {c: d}: e]\n",
            "{a, b: , c}\n",
            "[? a, ? b : c]\n",
            "a: &x [1, 2, [3]]\nb: *x\nc: [*x, *x]\n",
            "a: &x\n  b: 1\n  c: [1, 2]\nd: *x\n",
            "&x a: 1\nb: *x\n",
            "- &x\n  - 1\n  - 2\n- *x\n",
            "a: &e\nb: *e\n",
            "a: !!str 1\nb: !custom [1]\nc: !<tag:x,2000:a> {}\n",
            "a: |\n  [[[\n  ]]\nb: >-\n  {x\n\n  y}\nc: |2\n    z\n",
            "a: 'it''s [x'\nb: \"q \\\" [\"\nc: plain [x] {y}\n",
            "a: multi\n  line [\n  plain\nb: 1\n",
            "--- a\n--- [b]\n...\n--- {c: d}\n",
            "%YAML 1.2\n---\na: 1\n",
            "a: # c [\n  b\n",
            "[a, b]: c\n",
            "a:\n- b\n-\n- c: d\n  e: f\n",
            "{a: [b, {c: [d]}]}\n",
            "a: [\n  b,\n  c\n]\n",
            "\u{feff}a: 1\n",
            "a:\r\n  b: 1\r\n",
        ] {
            bounds(s);
        }
    }

    #[test]
    fn deep_flow_nesting_is_refused_early() {
        let deep = format!(
            "apiVersion: v1\nkind: Pod\nx: {}{}\n",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert_eq!(
            yaml(&deep).unwrap_err(),
            LimitError::TooDeep {
                limit: 64,
                line: 3,
                column: 67
            }
        );
        assert_eq!(
            yaml(&deep).unwrap_err().to_string(),
            "refused: nested deeper than the limit of 64 levels at line 3 column 67"
        );
        let ok = format!("x: {}{}\n", "[".repeat(63), "]".repeat(63));
        assert_eq!(yaml(&ok).unwrap().depth, 64);
        let maps = format!("x: {}{}\n", "{a: ".repeat(64), "}".repeat(64));
        assert!(matches!(yaml(&maps), Err(LimitError::TooDeep { .. })));
        // single-pair mappings inside sequences nest too
        let pairs = format!("{}{}\n", "[a: ".repeat(40), "]".repeat(40));
        bounds(&format!("{}{}\n", "[a: ".repeat(20), "]".repeat(20)));
        assert!(matches!(yaml(&pairs), Err(LimitError::TooDeep { .. })));
    }

    #[test]
    fn deep_block_nesting_is_refused() {
        let mut s = String::new();
        for i in 0..70 {
            s.push_str(&" ".repeat(i));
            s.push_str("a:\n");
        }
        assert!(matches!(
            yaml(&s),
            Err(LimitError::TooDeep { line: 65, .. })
        ));
        let compact = format!("{}a\n", "- ".repeat(70));
        assert!(matches!(yaml(&compact), Err(LimitError::TooDeep { .. })));
        bounds(&format!("{}a\n", "- ".repeat(30)));
        // an indentless sequence is a level of its own
        let mut s = String::new();
        for i in 0..30 {
            s.push_str(&" ".repeat(2 * i));
            s.push_str("a:\n");
            s.push_str(&" ".repeat(2 * i));
            s.push_str("- b: 1\n");
        }
        bounds(&s);
        assert_eq!(yaml(&s).unwrap().depth, 61);
    }

    #[test]
    fn depth_hidden_behind_a_string_or_scalar_is_still_seen() {
        // What a careless pass would take for the start of a quoted string is plain text or
        // block scalar content to the YAML scanner, and the brackets after it are real.
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        for s in [
            format!("a: it's\nb: {deep} '\n"),
            format!("a: |\n  '\nb: {deep}\n"),
            format!("a: |\n  \"\nb: {deep}\n"),
            format!("a: x # '\nb: {deep}\n"),
            format!("a: x#'\nb: {deep}\n"),
            format!("a: \"x\"#'\nb: {deep}\n"),
            format!("- a\n  '\nb: {deep}\n"),
            format!("a: !t'x\nb: {deep}\n"),
            format!("a: b\n  c '\nd: {deep}\n"),
            format!("a: 'x\n\n  y'\nb: {deep}\n"),
        ] {
            assert!(
                matches!(yaml(&s), Err(LimitError::TooDeep { .. })),
                "{s:?}: {:?}",
                yaml(&s)
            );
        }
    }

    #[test]
    fn aliases_count_as_the_nodes_they_repeat() {
        let anchor = format!("[{}1]", "1, ".repeat(99));
        let s = format!("a: &a {anchor}\nb: [{}]\n", vec!["*a"; 2000].join(", "));
        assert!(matches!(yaml(&s), Err(LimitError::TooManyNodes { .. })));
        // billion laughs
        let mut s = String::from("a: &a [x, x, x, x, x, x, x, x, x]\n");
        for i in 0..9 {
            s.push_str(&format!(
                "b{i}: &b{i} [{}]\n",
                vec![
                    if i == 0 {
                        "*a".to_owned()
                    } else {
                        format!("*b{}", i - 1)
                    };
                    9
                ]
                .join(",")
            ));
        }
        assert!(matches!(yaml(&s), Err(LimitError::TooManyNodes { .. })));
        // everyday use is fine
        let s = "env: &env\n- {name: A, value: '1'}\nc:\n- env: *env\n- env: *env\n";
        bounds(s);
        assert!(yaml(s).unwrap().nodes < 100);
    }

    #[test]
    fn nodes_documents_and_scalars_are_counted() {
        let many = format!("x: [{}a]\n", "a,".repeat(60_000));
        assert!(matches!(yaml(&many), Err(LimitError::TooManyNodes { .. })));
        let lines = "- \n".repeat(150_000);
        assert!(matches!(yaml(&lines), Err(LimitError::TooManyNodes { .. })));
        let docs = "---\n".repeat(17);
        assert_eq!(
            yaml(&docs).unwrap_err(),
            LimitError::TooManyDocuments {
                limit: 16,
                line: 17
            }
        );
        assert_eq!(yaml(&"---\n".repeat(16)).unwrap().documents, 16);
        assert_eq!(yaml("a\n...\nb\n").unwrap().documents, 2);
        let big = "y".repeat(1024 * 1024 + 1);
        for s in [
            format!("a: \"{big}\"\n"),
            format!("a: '{big}'\n"),
            format!("a: {big}\n"),
            format!("a: |\n  {big}\n"),
        ] {
            assert_eq!(
                yaml(&s).unwrap_err(),
                LimitError::ScalarTooLong {
                    limit: 1024 * 1024,
                    line: 1,
                    column: 4
                }
            );
        }
        // a long plain scalar over many lines is one scalar
        let folded = format!("a: {}\n", "word\n  ".repeat(200_000));
        assert!(matches!(
            yaml(&folded),
            Err(LimitError::ScalarTooLong { line: 1, .. })
        ));
        let comments = "# [[[[ '\n".repeat(100_000);
        assert_eq!(yaml(&comments).unwrap().nodes, 0);
    }

    #[test]
    fn size_and_encoding() {
        let small = Limits { max_bytes: 10, ..M };
        assert_eq!(
            check(b"a: 12345678\n", Syntax::Yaml, &small).unwrap_err(),
            LimitError::TooLarge { limit: 10 }
        );
        assert_eq!(
            check(b"a: 1\nb: \xff\n", Syntax::Yaml, &M).unwrap_err(),
            LimitError::NotUtf8 { line: 2, column: 4 }
        );
        assert_eq!(
            check("é: \u{2028}\u{85}x\n".as_bytes(), Syntax::Yaml, &M)
                .unwrap()
                .documents,
            1
        );
    }

    #[test]
    fn json_is_measured_exactly() {
        let j = |s: &str| check(s.as_bytes(), Syntax::Json, &M);
        let s = j(r#"{"a": [1, {"b": "x\"[{"}], "c": null}"#).unwrap();
        assert_eq!((s.depth, s.nodes, s.longest_scalar), (3, 9, 7));
        let deep = format!("{}{}", "[".repeat(65), "]".repeat(65));
        assert!(matches!(
            j(&deep),
            Err(LimitError::TooDeep { column: 65, .. })
        ));
        let many = format!("[{}0]", "0,".repeat(100_000));
        assert!(matches!(j(&many), Err(LimitError::TooManyNodes { .. })));
        let long = format!("\"{}\"", "x".repeat(1024 * 1024));
        assert!(matches!(j(&long), Err(LimitError::ScalarTooLong { .. })));
        assert!(j("\u{feff}{}").is_ok());
        assert!(j("]]]}}}").is_ok(), "syntax is the parser's business");
    }

    #[test]
    fn read_file_refuses_what_is_not_a_regular_file() {
        let d = std::env::temp_dir().join(format!("picolet-limits-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(d.join("dir.yaml")).unwrap();
        let small = Limits { max_bytes: 16, ..M };
        let e = read_file(&d.join("dir.yaml"), &M).unwrap_err();
        assert_eq!(e.to_string(), "not a regular file: it is a directory");
        let e = read_file(Path::new("/dev/zero"), &M).unwrap_err();
        assert_eq!(
            e.to_string(),
            "not a regular file: it is a character device"
        );
        std::os::unix::fs::symlink("/dev/zero", d.join("zero.yaml")).unwrap();
        assert!(matches!(
            read_file(&d.join("zero.yaml"), &M),
            Err(ReadError::NotRegular("a character device"))
        ));
        nix::unistd::mkfifo(&d.join("fifo.yaml"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        // Opening a FIFO with no writer would block a plain open forever.
        assert!(matches!(
            read_file(&d.join("fifo.yaml"), &M),
            Err(ReadError::NotRegular("a named pipe (FIFO)"))
        ));
        fs::write(d.join("big.yaml"), "x".repeat(17)).unwrap();
        assert_eq!(
            read_file(&d.join("big.yaml"), &small)
                .unwrap_err()
                .to_string(),
            "refused: larger than the limit of 16 bytes"
        );
        fs::write(d.join("ok.yaml"), "a: 1\n").unwrap();
        assert_eq!(read_file(&d.join("ok.yaml"), &small).unwrap(), b"a: 1\n");
        assert!(matches!(
            read_file(&d.join("missing.yaml"), &M),
            Err(ReadError::Io(e)) if e.kind() == io::ErrorKind::NotFound
        ));
        fs::remove_dir_all(&d).unwrap();
    }
}
