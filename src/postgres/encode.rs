//! Parameters: a caller's values encoded once, in its own task, in the binary
//! format of the statement's parameter types, then bound as they are (one
//! row of a multi-row INSERT, or a statement on its own).

use bytes::{Bytes, BytesMut};
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};

use crate::error::{Error, Kind};

/// Most bind parameters in one PostgreSQL statement (the protocol's Int16
/// count).
pub(crate) const MAX_PARAMS: usize = 65535;

/// One owned PostgreSQL bind value: any `ToSql + Send + Sync + 'static`
/// value, boxed (the bind value of [`tower::Statement`](crate::tower)).
#[derive(Debug)]
pub struct PgValue(Box<dyn ToSql + Send + Sync>);

impl PgValue {
    /// Boxes a value.
    pub fn new<T>(value: T) -> Self
    where
        T: ToSql + Send + Sync + 'static,
    {
        PgValue(Box::new(value))
    }

    /// The value, as tokio-postgres takes parameters.
    pub fn as_sql(&self) -> &(dyn ToSql + Sync) {
        &*self.0
    }
}

/// One statement's parameters as a caller gave them.
#[derive(Clone, Copy)]
pub(crate) enum PgArgs<'a> {
    /// Borrowed, as tokio-postgres takes them.
    Refs(&'a [&'a (dyn ToSql + Sync)]),
    /// Owned values (tower requests).
    #[cfg_attr(
        not(feature = "tower"),
        allow(dead_code, reason = "built by the tower services only")
    )]
    Owned(&'a [PgValue]),
}

impl<'a> PgArgs<'a> {
    pub(crate) fn len(&self) -> usize {
        match self {
            PgArgs::Refs(p) => p.len(),
            PgArgs::Owned(p) => p.len(),
        }
    }

    fn get(&self, i: usize) -> Option<&'a (dyn ToSql + Sync)> {
        match *self {
            PgArgs::Refs(p) => p.get(i).copied(),
            PgArgs::Owned(p) => p.get(i).map(PgValue::as_sql),
        }
    }
}

/// One caller's parameters, encoded in the binary format of their types.
pub(crate) struct PgRow {
    buf: Bytes,
    /// Byte range of each parameter in `buf`; `None` for NULL.
    spans: Vec<Option<(u32, u32)>>,
    /// The text of its keyed update family the row is a caller of (0
    /// outside families).
    member: u16,
}

impl PgRow {
    /// Which text of its keyed update family the row's caller gave.
    pub(crate) fn member(&self) -> u16 {
        self.member
    }

    /// Marks the row as a caller of text `member` of its family.
    pub(crate) fn set_member(&mut self, member: u16) {
        self.member = member;
    }

    /// Encoded size.
    pub(crate) fn bytes(&self) -> usize {
        self.buf.len()
    }

    /// The encoded parameters, ready to bind.
    pub(crate) fn raw(&self) -> impl ExactSizeIterator<Item = Raw<'_>> + '_ {
        self.spans
            .iter()
            .map(move |s| Raw(s.map(|s| self.slice(s))))
    }

    /// The encoded bytes of parameter `i` (`None` for NULL or out of range).
    pub(crate) fn param(&self, i: usize) -> Option<&[u8]> {
        self.spans.get(i).copied().flatten().map(|s| self.slice(s))
    }

    fn slice(&self, (a, b): (u32, u32)) -> &[u8] {
        &self.buf[a as usize..b as usize]
    }
}

thread_local! {
    /// Encoded size of the last row this thread encoded.
    static ROW_SIZE_HINT: std::cell::Cell<usize> = const { std::cell::Cell::new(64) };
}

/// Encodes `params` for a statement whose parameters have `types`, checking
/// the count and each value's type. Runs in the caller's task.
pub(crate) fn encode(types: &[Type], params: PgArgs<'_>) -> Result<PgRow, Error> {
    if params.len() != types.len() {
        return Err(Error::params(format!(
            "statement takes {} parameter{}, {} given",
            types.len(),
            if types.len() == 1 { "" } else { "s" },
            params.len()
        )));
    }
    if types.len() > MAX_PARAMS {
        return Err(Error::too_large(format!(
            "{} bind parameters exceed PostgreSQL's limit of {MAX_PARAMS}",
            types.len()
        )));
    }
    // Size the buffer like this thread's previous row: one allocation per row
    // in steady state instead of a chain of regrowths.
    let mut buf = BytesMut::with_capacity(ROW_SIZE_HINT.get());
    let mut spans = Vec::with_capacity(types.len());
    for (i, ty) in types.iter().enumerate() {
        let param = params
            .get(i)
            .ok_or_else(|| Error::internal("parameter count changed while encoding"))?;
        let start = buf.len();
        match param.to_sql_checked(ty, &mut buf) {
            Ok(IsNull::No) => match (u32::try_from(start), u32::try_from(buf.len())) {
                (Ok(a), Ok(b)) => spans.push(Some((a, b))),
                _ => return Err(Error::too_large("a row's parameters exceed 4 GiB")),
            },
            Ok(IsNull::Yes) => {
                buf.truncate(start);
                spans.push(None);
            }
            Err(e) => {
                return Err(Error::with_source(
                    Kind::Params,
                    format!("parameter ${} cannot be sent as {ty}", i + 1),
                    e,
                ));
            }
        }
    }
    ROW_SIZE_HINT.set(buf.len().clamp(64, 64 << 10));
    Ok(PgRow {
        buf: buf.freeze(),
        spans,
        member: 0,
    })
}

/// An already-encoded parameter value; accepts any type because it was
/// type-checked when encoded.
#[derive(Debug)]
pub(crate) struct Raw<'a>(Option<&'a [u8]>);

impl<'a> Raw<'a> {
    /// A value already encoded as `bytes`.
    pub(crate) fn bytes(bytes: &'a [u8]) -> Raw<'a> {
        Raw(Some(bytes))
    }
}

impl ToSql for Raw<'_> {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self.0 {
            Some(bytes) => {
                out.extend_from_slice(bytes);
                Ok(IsNull::No)
            }
            None => Ok(IsNull::Yes),
        }
    }
    fn accepts(_: &Type) -> bool {
        true
    }
    to_sql_checked!();
}

/// A returned column's raw bytes, of any type.
pub(crate) struct RawValue<'a>(pub(crate) Option<&'a [u8]>);

impl<'a> FromSql<'a> for RawValue<'a> {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(RawValue(Some(raw)))
    }
    fn from_sql_null(_: &Type) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(RawValue(None))
    }
    fn accepts(_: &Type) -> bool {
        true
    }
}
