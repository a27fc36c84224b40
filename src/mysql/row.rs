//! One caller's row of a coalesced statement on MySQL / MariaDB.

use mysql_async::Value;

/// One caller's parameters, checked against its statement.
pub(crate) struct MyRow {
    pub(super) values: Vec<Value>,
    /// What this row adds to the statement's packets: its values as the
    /// binary protocol encodes them, their type bytes and NULL bit, and its
    /// share of the statement text.
    pub(crate) bytes: usize,
    /// A keyed update's text in its family (see `family`), 0 otherwise.
    pub(super) member: u16,
}

#[cfg(feature = "bench")]
impl MyRow {
    /// The row's values (the `engine` bench).
    pub(crate) fn values(&self) -> &[Value] {
        &self.values
    }
}

#[cfg(test)]
impl MyRow {
    /// A row of `values` (tests).
    pub(crate) fn of(values: Vec<Value>) -> MyRow {
        MyRow {
            values,
            bytes: 0,
            member: 0,
        }
    }
}
