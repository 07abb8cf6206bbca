//! The pod manager: the desired pods by UID, with an index by namespace and name. (Mirror pods
//! of static pods will map here too, once pods come from an apiserver.)

use std::collections::HashMap;
use std::rc::Rc;

use crate::api::Pod;

#[derive(Debug, Default)]
pub struct PodManager {
    by_uid: HashMap<String, Rc<Pod>>,
    by_name: HashMap<(String, String), String>,
}

impl PodManager {
    /// Adds or replaces a pod.
    pub fn upsert(&mut self, pod: Rc<Pod>) {
        let m = &pod.metadata;
        let uid = m.uid.clone();
        self.by_name
            .insert((m.namespace.clone(), m.name.clone()), uid.clone());
        self.by_uid.insert(uid, pod);
    }

    pub fn remove(&mut self, uid: &str) -> Option<Rc<Pod>> {
        let pod = self.by_uid.remove(uid)?;
        let key = (pod.metadata.namespace.clone(), pod.metadata.name.clone());
        if self.by_name.get(&key).is_some_and(|u| u == uid) {
            self.by_name.remove(&key);
        }
        Some(pod)
    }

    pub fn get(&self, uid: &str) -> Option<&Rc<Pod>> {
        self.by_uid.get(uid)
    }

    pub fn contains(&self, uid: &str) -> bool {
        self.by_uid.contains_key(uid)
    }

    /// The desired pod of this namespace and name, if any.
    pub fn by_name(&self, namespace: &str, name: &str) -> Option<&Rc<Pod>> {
        let uid = self.by_name.get(&(namespace.to_owned(), name.to_owned()))?;
        self.by_uid.get(uid)
    }

    pub fn pods(&self) -> impl Iterator<Item = &Rc<Pod>> {
        self.by_uid.values()
    }

    pub fn len(&self) -> usize {
        self.by_uid.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_uid.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ObjectMeta;

    fn pod(uid: &str, ns: &str, name: &str) -> Rc<Pod> {
        Rc::new(Pod {
            metadata: ObjectMeta {
                uid: uid.into(),
                namespace: ns.into(),
                name: name.into(),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    #[test]
    fn indexes_by_uid_and_name() {
        let mut m = PodManager::default();
        m.upsert(pod("u1", "default", "web"));
        m.upsert(pod("u2", "default", "db"));
        assert_eq!(m.len(), 2);
        assert_eq!(m.by_name("default", "web").unwrap().metadata.uid, "u1");
        // A new version of "web" (another UID) takes the name; removing the old one keeps it.
        m.upsert(pod("u3", "default", "web"));
        assert!(m.remove("u1").is_some());
        assert_eq!(m.by_name("default", "web").unwrap().metadata.uid, "u3");
        assert!(m.remove("u1").is_none());
        assert!(m.remove("u3").is_some());
        assert!(m.by_name("default", "web").is_none());
        assert!(m.contains("u2") && !m.contains("u3"));
        assert!(!m.is_empty());
    }
}
