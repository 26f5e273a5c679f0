//! The ACL lists nodes use, each held once. Most trees use a handful of
//! distinct lists for millions of nodes, so a node stores a 4-byte
//! [`AclId`] and the list lives here, counted (ZooKeeper's
//! ReferenceCountedACLCache does the same). The open list (everyone may do
//! everything, the ACL of every node created without one) is [`OPEN`], is
//! never stored, and costs a node nothing.
//!
//! Ids are local to one server: the log and snapshots' node records carry
//! lists or ids resolved through the snapshot's own table, so two members
//! may number the same list differently.

use std::collections::HashMap;
use std::sync::Arc;

use arbor_protocol::acl::Acl;
use foldhash::fast::RandomState;

/// A list's number in the [`AclTable`].
pub type AclId = u32;

/// The open ACL, `world:anyone:cdrwa`.
pub const OPEN: AclId = 0;

/// An interned ACL list.
pub type AclList = Arc<[Acl]>;

/// Distinct ACL lists one tree may hold: a client making up a new list for
/// every node must not grow the table without end. Past it, creates and
/// set-ACLs with a list not yet held fail with `LimitExceeded`.
pub const ACL_LISTS_MAX: usize = 1 << 20;

#[derive(Debug, Clone)]
struct Entry {
    acl: AclList,
    /// Nodes using the list.
    nodes: u64,
}

#[derive(Debug, Clone, Default)]
pub struct AclTable {
    /// By id less one (the open list has none); `None` for a freed id.
    entries: Vec<Option<Entry>>,
    ids: HashMap<AclList, AclId, RandomState>,
    free: Vec<AclId>,
}

impl AclTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// The open list: the one every node created without an ACL has.
    pub fn open() -> &'static [Acl] {
        static OPEN_LIST: std::sync::OnceLock<Vec<Acl>> = std::sync::OnceLock::new();
        OPEN_LIST.get_or_init(Acl::open)
    }

    /// The list `id` names. An id no node uses reads as the empty list,
    /// which grants nothing.
    pub fn get(&self, id: AclId) -> &[Acl] {
        if id == OPEN {
            return Self::open();
        }
        self.entries
            .get(id as usize - 1)
            .and_then(Option::as_ref)
            .map_or(&[], |entry| &entry.acl)
    }

    /// The shared list `id` names; `None` for the open list and for ids no
    /// node uses.
    pub fn list(&self, id: AclId) -> Option<AclList> {
        let entry = self.entries.get((id as usize).wrapping_sub(1))?.as_ref()?;
        Some(entry.acl.clone())
    }

    /// The id of `acl` if the table holds it (the open list always).
    pub fn find(&self, acl: &[Acl]) -> Option<AclId> {
        if Acl::is_open(acl) {
            return Some(OPEN);
        }
        self.ids.get(acl).copied()
    }

    /// Whether one more node may use `acl`.
    pub fn has_room_for(&self, acl: &[Acl]) -> bool {
        self.find(acl).is_some() || self.ids.len() < ACL_LISTS_MAX
    }

    /// Counts one more node using `acl`, storing it if new; its id. Check
    /// [`AclTable::has_room_for`] first: a full table is a bug here.
    pub fn acquire(&mut self, acl: &[Acl]) -> AclId {
        if let Some(id) = self.find(acl) {
            self.add_user(id);
            return id;
        }
        let list: AclList = acl.into();
        let entry = Entry {
            acl: list.clone(),
            nodes: 1,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.entries[id as usize - 1] = Some(entry);
                id
            }
            None => {
                self.entries.push(Some(entry));
                self.entries.len() as AclId
            }
        };
        self.ids.insert(list, id);
        id
    }

    /// Counts one more node using `id`, a list the table holds (found with
    /// [`AclTable::find`]).
    pub fn add_user(&mut self, id: AclId) {
        if let Some(Some(entry)) = self.entries.get_mut((id as usize).wrapping_sub(1)) {
            entry.nodes += 1;
        }
    }

    /// One node less uses `id`; the list goes once none does.
    pub fn release(&mut self, id: AclId) {
        let Some(slot) = self.entries.get_mut((id as usize).wrapping_sub(1)) else {
            return;
        };
        let Some(entry) = slot else { return };
        entry.nodes -= 1;
        if entry.nodes == 0 {
            if let Some(entry) = slot.take() {
                self.ids.remove(&entry.acl);
            }
            self.free.push(id);
        }
    }

    /// Distinct lists held (the open one not counted).
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Every list held, with its id.
    pub fn iter(&self) -> impl Iterator<Item = (AclId, &[Acl])> {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(index, entry)| Some((index as AclId + 1, &entry.as_ref()?.acl[..])))
    }
}

/// Builds a table from a snapshot: its lists under their recorded ids, each
/// then counted once per node that names it.
#[derive(Debug, Default)]
pub struct TableBuilder {
    lists: HashMap<AclId, AclList, RandomState>,
    users: HashMap<AclId, u64, RandomState>,
}

impl TableBuilder {
    /// A list the snapshot recorded under `id`.
    pub fn list(&mut self, id: AclId, acl: Vec<Acl>) -> Result<(), String> {
        if id == OPEN {
            return Err("an ACL list recorded under the open list's id".into());
        }
        if self.lists.insert(id, acl.into()).is_some() {
            return Err(format!("ACL list {id} recorded twice"));
        }
        Ok(())
    }

    /// A node naming `id`.
    pub fn user(&mut self, id: AclId) -> Result<(), String> {
        if id != OPEN && !self.lists.contains_key(&id) {
            return Err(format!("a node names ACL list {id}, which is not recorded"));
        }
        *self.users.entry(id).or_insert(0) += 1;
        Ok(())
    }

    /// The table; lists no node names are dropped.
    pub fn finish(self) -> AclTable {
        let mut table = AclTable::new();
        let top = self.lists.keys().copied().max().unwrap_or(0);
        table.entries = vec![None; top as usize];
        for (id, acl) in self.lists {
            let Some(&nodes) = self.users.get(&id) else {
                continue;
            };
            table.ids.insert(acl.clone(), id);
            table.entries[id as usize - 1] = Some(Entry { acl, nodes });
        }
        table.free = (1..=top)
            .rev()
            .filter(|&id| table.entries[id as usize - 1].is_none())
            .collect();
        table
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbor_protocol::acl::{Perms, DIGEST};

    fn alice() -> Vec<Acl> {
        vec![Acl::new(Perms::ALL, DIGEST, "alice:h")]
    }

    fn bob() -> Vec<Acl> {
        vec![Acl::new(Perms::READ, DIGEST, "bob:h")]
    }

    #[test]
    fn lists_are_shared_counted_and_freed() {
        let mut table = AclTable::new();
        assert_eq!(table.acquire(&Acl::open()), OPEN);
        let a = table.acquire(&alice());
        assert_eq!(table.acquire(&alice()), a);
        let b = table.acquire(&bob());
        assert_ne!(a, b);
        assert_eq!(table.len(), 2);
        assert_eq!(table.get(a), &alice()[..]);
        table.release(a);
        assert_eq!(table.get(a), &alice()[..], "one node still uses it");
        table.release(a);
        assert!(table.get(a).is_empty());
        assert_eq!(table.find(&alice()), None);
        assert_eq!(table.len(), 1);
        // The freed id is used again.
        assert_eq!(table.acquire(&alice()), a);
        table.release(OPEN);
        assert_eq!(table.get(OPEN), &Acl::open()[..]);
    }

    #[test]
    fn a_rebuilt_table_keeps_ids_and_drops_unused_lists() {
        let mut builder = TableBuilder::default();
        builder.list(3, alice()).expect("new id");
        builder.list(5, bob()).expect("new id");
        assert!(builder.list(5, bob()).is_err());
        assert!(builder.list(OPEN, bob()).is_err());
        builder.user(3).expect("recorded");
        builder.user(3).expect("recorded");
        builder.user(OPEN).expect("always there");
        assert!(builder.user(4).is_err());
        let mut table = builder.finish();
        assert_eq!(table.get(3), &alice()[..]);
        assert!(table.get(5).is_empty(), "no node names it");
        assert_eq!(table.len(), 1);
        table.release(3);
        assert_eq!(table.get(3), &alice()[..]);
        let next = table.acquire(&bob());
        assert!(next != 3 && next <= 5, "a free id below the top: {next}");
        assert_eq!(table.iter().count(), 2);
    }
}
