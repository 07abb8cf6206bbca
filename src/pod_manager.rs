//! The pod manager: the desired pods by UID. (A name index and the mirror-pod mapping join it
//! with their first users: the container-logs endpoint and pods from an apiserver.)

use std::collections::HashMap;
use std::rc::Rc;

use crate::api::Pod;

#[derive(Debug, Default)]
pub struct PodManager {
    by_uid: HashMap<String, Rc<Pod>>,
}

impl PodManager {
    /// Adds or replaces a pod.
    pub fn upsert(&mut self, pod: Rc<Pod>) {
        self.by_uid.insert(pod.metadata.uid.clone(), pod);
    }

    pub fn remove(&mut self, uid: &str) -> Option<Rc<Pod>> {
        self.by_uid.remove(uid)
    }

    pub fn get(&self, uid: &str) -> Option<&Rc<Pod>> {
        self.by_uid.get(uid)
    }

    pub fn contains(&self, uid: &str) -> bool {
        self.by_uid.contains_key(uid)
    }

    /// How many desired pods there are.
    pub fn count(&self) -> usize {
        self.by_uid.len()
    }

    /// Every desired pod (image GC and eviction read them in every build).
    pub fn pods(&self) -> impl Iterator<Item = &Rc<Pod>> {
        self.by_uid.values()
    }
}
