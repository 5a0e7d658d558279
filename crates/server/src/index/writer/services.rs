//! The Service resource: a Service's arrival, change and departure, and
//! which pods a headless Service selects.

use super::*;

impl Writer {
    pub fn apply_service(&mut self, svc: ServiceInfo) {
        if self.services.get(&svc.key) == Some(&svc) {
            return;
        }
        let key = svc.key.clone();
        let mut dirty = Vec::new();
        self.service_keys(&key, &mut dirty);
        self.unlink_service(&key);
        self.link_service(svc);
        self.service_keys(&key, &mut dirty);
        self.dirty.extend(dirty);
    }

    pub fn delete_service(&mut self, key: &ObjKey) {
        if !self.services.contains_key(key) {
            return;
        }
        let mut dirty = Vec::new();
        self.service_keys(key, &mut dirty);
        self.unlink_service(key);
        self.dirty.extend(dirty);
    }

    pub(super) fn retain_services<'a>(
        &mut self,
        namespace: Option<&str>,
        listed: impl Iterator<Item = &'a ObjKey>,
    ) {
        for k in &vanished(&self.services, namespace, listed) {
            self.delete_service(k);
        }
    }

    /// Every key whose names depend on this Service as it is now: its own
    /// names, its EndpointSlices' names, its members' dashed names and PTRs (whose most specific name
    /// may be under it), and the hostname names under a subdomain of its name
    /// (which policies tie to the Service).
    pub(super) fn service_keys(&self, key: &ObjKey, out: &mut Vec<Key>) {
        out.push(Key::Svc(key.clone()));
        self.slice_service_keys(key, out);
        if let Some(ServiceKind::ClusterIp(ips)) = self.services.get(key).map(|s| &s.kind) {
            for ip in ips {
                out.push(Key::Ptr(*ip));
            }
        }
        for &id in self.members.get(key).into_iter().flatten() {
            for ip in &self.pod(id).ips {
                out.push(Key::SvcIp(key.clone(), *ip));
                out.push(Key::Ptr(*ip));
            }
        }
        let under = self
            .hosts
            .get(key.namespace.as_str())
            .and_then(|subs| subs.get(key.name.as_str()));
        // A hostname held by several pods is pushed for each: the batch
        // rebuilds each key once.
        for id in under.into_iter().flat_map(ByName::iter) {
            let pod = self.pod(id);
            out.push(Key::Host {
                ns: key.namespace.clone(),
                sub: key.name.clone(),
                host: pod.hostname().unwrap_or_default().to_string(),
            });
            for ip in &pod.ips {
                out.push(Key::Ptr(*ip));
            }
        }
    }

    /// Whether a node instance forwards this Service's names although its
    /// namespace is in scope: a headless Service without a selector when
    /// the relay serves no EndpointSlices, or, in a namespace held in part,
    /// a headless Service whose selector does not keep to the held gangs
    /// (its other pods are not here).
    pub(super) fn is_unheld(&self, svc: &ServiceInfo) -> bool {
        if !matches!(svc.kind, ServiceKind::Headless) {
            return false;
        }
        match &svc.selector {
            None => !self.table.scope().slices_held(),
            Some(selector) => self
                .partial
                .get(&svc.key.namespace)
                .is_some_and(|gangs| !pins(gangs, selector)),
        }
    }

    pub(super) fn link_service(&mut self, svc: ServiceInfo) {
        let key = svc.key.clone();
        if self.table.scope().is_node() {
            let unheld = self.is_unheld(&svc);
            self.table
                .scope()
                .set_unheld(&key.namespace, &key.name, unheld);
        }
        self.stale_sets.insert(key.clone());
        let ns = key.namespace.clone();
        if let Some(anchor) = anchor(&svc) {
            self.selectors
                .entry(ns.clone())
                .or_default()
                .entry(anchor)
                .or_default()
                .insert(key.name.clone());
        }
        if let ServiceKind::ClusterIp(ips) = &svc.kind {
            for ip in ips {
                self.ip_services.entry(*ip).or_default().insert(key.clone());
            }
        }
        if svc.kind == ServiceKind::Headless && svc.selector.is_some() {
            // A Service change re-evaluates only its namespace's pods.
            let mut members = BTreeSet::new();
            if let Some(names) = self.ns_pods.get(ns.as_str()) {
                for id in names.iter() {
                    if selects(&svc, self.pods.get(id)) {
                        members.insert(id);
                        let pod = self.pods.get_mut(id);
                        self.interner
                            .change_services(&mut pod.services, &key.name, true);
                    }
                }
            }
            if !members.is_empty() {
                self.members.insert(key.clone(), members);
            }
        }
        self.services.insert(key, svc);
    }

    pub(super) fn unlink_service(&mut self, key: &ObjKey) {
        let Some(svc) = self.services.remove(key) else {
            return;
        };
        if self.table.scope().is_node() {
            self.table
                .scope()
                .set_unheld(&key.namespace, &key.name, false);
        }
        self.sets.remove(key);
        self.stale_sets.insert(key.clone());
        if let Some(anchor) = anchor(&svc)
            && let Some(anchors) = self.selectors.get_mut(&key.namespace)
        {
            remove_from(anchors, &anchor, &key.name);
            if anchors.is_empty() {
                self.selectors.remove(&key.namespace);
            }
        }
        if let ServiceKind::ClusterIp(ips) = &svc.kind {
            for ip in ips {
                remove_from(&mut self.ip_services, ip, key);
            }
        }
        if let Some(members) = self.members.remove(key) {
            for id in members {
                let pod = self.pods.get_mut(id);
                self.interner
                    .change_services(&mut pod.services, &key.name, false);
            }
        }
    }
}

/// The selector pair a Service that can select pods is found by: any pair
/// would do, since a pod must carry all of them.
pub(super) fn anchor(svc: &ServiceInfo) -> Option<(Box<str>, Box<str>)> {
    if svc.kind != ServiceKind::Headless {
        return None;
    }
    let (k, v) = svc.selector.as_ref()?.first()?;
    Some((k.as_str().into(), v.as_str().into()))
}

/// Does the Service select this pod? Only headless Services with a selector
/// select pods for DNS; an empty selector selects nothing (as for Endpoints).
pub(super) fn selects(svc: &ServiceInfo, pod: &Pod) -> bool {
    if svc.kind != ServiceKind::Headless {
        return false;
    }
    match &svc.selector {
        Some(sel) if !sel.is_empty() => sel.iter().all(|(k, v)| pod.has_label(k, v)),
        _ => false,
    }
}

/// Whether a Service selector keeps to `gangs`: it requires their label
/// (or one the same controller always sets to the same value: the Job
/// controller sets both job-name labels) to be one of theirs, so every
/// pod it selects is held.
pub(crate) fn pins(gangs: &GangSelector, selector: &[(String, String)]) -> bool {
    let job_name = |k: &str| k == JOB_NAME || k == LEGACY_JOB_NAME;
    let same = |k: &str| k == gangs.key || (job_name(k) && job_name(&gangs.key));
    selector
        .iter()
        .any(|(k, v)| same(k) && gangs.values.contains(v))
}
