//! The Pod resource: a pod's arrival, change and departure, and the
//! writer's indexes of pods (by namespace and name, by hostname, by IP).

use std::sync::Arc;

use super::services::selects;
use super::*;

impl Writer {
    /// The id of a pod by namespace and name.
    pub(super) fn pod_id(&self, ns: &str, name: &str) -> Option<PodId> {
        self.ns_pods
            .get(ns)?
            .get(name, |id| self.pod_name(id))
            .next()
    }

    pub(super) fn pod_name(&self, id: PodId) -> &str {
        self.pods.get(id).name()
    }

    /// The pods holding `ip`, in any state and no order.
    pub(super) fn ip_holders(&self, ip: IpAddr) -> impl Iterator<Item = &Pod> {
        self.ip_pods
            .get(ip, |id| &self.pods.get(id).ips)
            .map(|id| self.pods.get(id))
    }

    pub(super) fn pod(&self, id: PodId) -> &Pod {
        self.pods.get(id)
    }

    pub fn apply_pod(&mut self, pod: PodInfo) {
        let old = self.pod_id(&pod.key.namespace, &pod.key.name);
        if old.is_some_and(|id| self.pod(id).same_as(&pod)) {
            return;
        }
        let mut dirty = Vec::new();
        if let Some(id) = old {
            self.pod_keys(id, &mut dirty);
            self.unlink_pod(id);
        }
        let id = self.link_pod(pod);
        self.pod_keys(id, &mut dirty);
        self.dirty.extend(dirty);
    }

    pub fn delete_pod(&mut self, key: &ObjKey) {
        let Some(id) = self.pod_id(&key.namespace, &key.name) else {
            return;
        };
        let mut dirty = Vec::new();
        self.pod_keys(id, &mut dirty);
        self.unlink_pod(id);
        self.dirty.extend(dirty);
    }

    /// Remove the pods of a listed scope that the list no longer has.
    pub(super) fn retain_pods<'a>(
        &mut self,
        namespace: Option<&str>,
        listed: impl Iterator<Item = &'a ObjKey>,
    ) {
        let keep: HashSet<(&str, &str)> = listed
            .map(|k| (k.namespace.as_str(), k.name.as_str()))
            .collect();
        let gone: Vec<PodId> = self
            .ns_pods
            .iter()
            .filter(|(ns, _)| namespace.is_none_or(|n| *n == ***ns))
            .flat_map(|(ns, names)| {
                names
                    .iter()
                    .filter(|&id| !keep.contains(&(&**ns, self.pod_name(id))))
            })
            .collect();
        drop(keep);
        for id in gone {
            let mut dirty = Vec::new();
            self.pod_keys(id, &mut dirty);
            self.unlink_pod(id);
            self.dirty.extend(dirty);
        }
    }

    /// Every key whose names depend on this pod as it is now.
    pub(super) fn pod_keys(&self, id: PodId, out: &mut Vec<Key>) {
        let pod = self.pod(id);
        let ns = pod.ns();
        if let (Some(host), Some(sub)) = (pod.hostname(), pod.subdomain()) {
            // Pods sharing the hostname: which one wins decides their PTRs
            // and SRV targets too.
            for sibling in self.host_pods(ns, sub, host) {
                if sibling == id {
                    continue;
                }
                let sp = self.pod(sibling);
                for ip in &sp.ips {
                    out.push(Key::Ptr(*ip));
                }
                for svc in &sp.services {
                    let sk = ObjKey::new(&**ns, &**svc);
                    out.push(Key::Member(sk.clone(), sibling));
                    out.push(Key::Svc(sk));
                }
            }
            out.push(Key::Host {
                ns: ns.to_string(),
                sub: sub.to_string(),
                host: host.to_string(),
            });
        }
        for svc in &pod.services {
            let sk = ObjKey::new(&**ns, &**svc);
            for ip in &pod.ips {
                out.push(Key::SvcIp(sk.clone(), *ip));
            }
            out.push(Key::Member(sk.clone(), id));
            out.push(Key::Svc(sk));
        }
        for ip in &pod.ips {
            out.push(Key::PodIp {
                ns: ns.to_string(),
                ip: *ip,
            });
            out.push(Key::Ptr(*ip));
        }
        self.rank_keys(id, out);
    }

    /// The pods with a hostname under a subdomain, in any state.
    pub(super) fn host_pods<'a>(
        &'a self,
        ns: &str,
        sub: &str,
        host: &'a str,
    ) -> impl Iterator<Item = PodId> + 'a {
        let hostname = |id| self.pods.get(id).hostname().unwrap_or_default();
        self.hosts
            .get(ns)
            .and_then(|subs| subs.get(sub))
            .into_iter()
            .flat_map(move |by| by.get(host, hostname))
    }

    pub(super) fn link_pod(&mut self, info: PodInfo) -> PodId {
        let namespace = &info.key.namespace;
        // Share the namespace and subdomain strings with the indexes that
        // hold them already.
        let ns = match self.ns_pods.get_key_value(namespace.as_str()) {
            Some((ns, _)) => ns.clone(),
            None => {
                let ns = Arc::<str>::from(namespace.as_str());
                self.ns_pods.insert(ns.clone(), ByName::default());
                ns
            }
        };
        let subdomain = info.subdomain.as_deref().map(|sub| {
            self.hosts
                .get(&*ns)
                .and_then(|subs| subs.get_key_value(sub))
                .map_or_else(|| Arc::from(sub), |(s, _)| s.clone())
        });
        let mut pod = Pod::new(info, ns.clone(), subdomain, &mut self.interner);
        if let Some(anchors) = self.selectors.get(&*ns) {
            let mut services = SmallSet::default();
            for pair in pod.labels() {
                for svc in anchors.get(&**pair).into_iter().flatten() {
                    if let Some(s) = self.services.get(&ObjKey::new(&*ns, svc.as_str()))
                        && selects(s, &pod)
                    {
                        services.insert(svc.as_str().into());
                    }
                }
            }
            pod.services = self.interner.services(services);
        }
        let id = self.pods.insert(pod);
        let pods = &self.pods;
        let pod = pods.get(id);
        if let Some(names) = self.ns_pods.get_mut(&*ns) {
            names.insert(id, |i| pods.get(i).name());
        }
        if let (Some(_), Some(sub)) = (pod.hostname(), pod.subdomain()) {
            self.hosts
                .entry(ns.clone())
                .or_default()
                .entry(sub.clone())
                .or_default()
                .insert(id, |i| pods.get(i).hostname().unwrap_or_default());
        }
        self.ip_pods.insert(id, |i| &pods.get(i).ips);
        for svc in &pod.services {
            self.members
                .entry(ObjKey::new(&*ns, &**svc))
                .or_default()
                .insert(id);
        }
        self.link_ranks(id);
        id
    }

    pub(super) fn unlink_pod(&mut self, id: PodId) {
        self.unlink_ranks(id);
        let pod = self.pods.remove(id);
        let ns = pod.ns();
        for svc in &pod.services {
            if let Some(set) = self.sets.get_mut(&ObjKey::new(&**ns, &**svc)) {
                set.take(id, &pod.ips);
            }
        }
        if let Some(names) = self.ns_pods.get_mut(&**ns) {
            names.remove(id, pod.name());
            if names.is_empty() {
                self.ns_pods.remove(&**ns);
            }
        }
        if let (Some(host), Some(sub)) = (pod.hostname(), pod.subdomain())
            && let Some(subs) = self.hosts.get_mut(&**ns)
        {
            if let Some(hosts) = subs.get_mut(&**sub) {
                hosts.remove(id, host);
                if hosts.is_empty() {
                    subs.remove(&**sub);
                }
            }
            if subs.is_empty() {
                self.hosts.remove(&**ns);
            }
        }
        self.ip_pods.remove(id, &pod.ips);
        for svc in &pod.services {
            remove_from(&mut self.members, &ObjKey::new(&**ns, &**svc), &id);
        }
        pod.release(&mut self.interner);
    }
}
