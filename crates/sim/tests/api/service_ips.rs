//! Service ClusterIPs and IP families, single and dual stack, allocated
//! and validated as the API server does.

use k8s_openapi::api::core::v1::{Namespace, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use podns_sim::SimArgs;
use serde_json::{Value, json};

use super::support::*;

fn svc_body(name: &str, spec: Value) -> Service {
    let mut spec = spec;
    if spec.get("ports").is_none() {
        spec["ports"] = json!([{"port": 80}]);
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

async fn mk_svc(api: &Api<Service>, name: &str, spec: Value) -> Result<Service, kube::Error> {
    api.create(&PostParams::default(), &svc_body(name, spec))
        .await
}

async fn patch_svc(api: &Api<Service>, name: &str, spec: Value) -> Result<Service, kube::Error> {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": spec})),
    )
    .await
}

/// `(clusterIP, clusterIPs, ipFamilies, ipFamilyPolicy)`, empty when unset.
fn ip_fields(s: &Service) -> (String, Vec<String>, Vec<String>, String) {
    let spec = s.spec.as_ref().unwrap();
    (
        spec.cluster_ip.clone().unwrap_or_default(),
        spec.cluster_ips.clone().unwrap_or_default(),
        spec.ip_families.clone().unwrap_or_default(),
        spec.ip_family_policy.clone().unwrap_or_default(),
    )
}

/// The fields [`ip_fields`] reads, as a test expects them.
fn fields(
    ip: &str,
    ips: &[&str],
    families: &[&str],
    policy: &str,
) -> (String, Vec<String>, Vec<String>, String) {
    let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
    (ip.into(), owned(ips), owned(families), policy.into())
}

fn in_net(ip: &str, net: &str) -> bool {
    let net: ipnet::IpNet = net.parse().unwrap();
    net.contains(&ip.parse::<std::net::IpAddr>().unwrap())
}

/// A dual-stack Service's fields: two IPs, one per family, primary first.
fn assert_dual(s: &Service, families: [&str; 2], policy: &str) {
    let (ip, ips, fams, pol) = ip_fields(s);
    assert_eq!(ips.len(), 2, "{ips:?}");
    assert_eq!(ip, ips[0], "clusterIP is clusterIPs[0]");
    assert_eq!(fams, families);
    assert_eq!(pol, policy);
    for (ip, fam) in ips.iter().zip(fams) {
        let net = if fam == "IPv4" {
            "10.96.0.0/12"
        } else {
            "fd00:10:96::/112"
        };
        assert!(in_net(ip, net), "{ip} not in {net}");
    }
}

/// The 422 `Invalid` of a rejected write: its message, and its causes as
/// `(field, reason, message)`.
fn invalid(r: Result<Service, kube::Error>) -> (String, Vec<(String, String, String)>) {
    match r {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"), "{s:?}");
            let d = s.details.expect("an Invalid Status has details");
            assert_eq!(d.kind, "Service");
            let causes = d
                .causes
                .iter()
                .map(|c| (c.field.clone(), c.reason.clone(), c.message.clone()))
                .collect();
            (s.message, causes)
        }
        other => panic!("expected a 422 Invalid, got {other:?}"),
    }
}

fn cause(field: &str, message: &str) -> (String, String, String) {
    (field.into(), "FieldValueInvalid".into(), message.into())
}

/// `r` is a 422 Invalid with this one cause.
fn refused(r: Result<Service, kube::Error>, field: &str, message: &str) {
    assert_eq!(invalid(r).1, [cause(field, message)]);
}

#[tokio::test]
async fn single_stack_services_default_and_reject_dual_stack() {
    let sim = start_default().await;
    let api: Api<Service> = Api::namespaced(sim.client(), "default");
    let k = api.get("kubernetes").await.unwrap();
    assert_eq!(
        ip_fields(&k),
        fields("10.96.0.1", &["10.96.0.1"], &["IPv4"], "SingleStack")
    );
    // Nothing asked: SingleStack, the cluster's family, one IP.
    let (ip, ips, fams, pol) = ip_fields(&mk_svc(&api, "plain", json!({})).await.unwrap());
    assert!(in_net(&ip, "10.96.0.0/12"), "{ip}");
    assert_eq!(
        (ips, fams, pol.as_str()),
        (vec![ip], vec!["IPv4".to_string()], "SingleStack")
    );
    // PreferDualStack keeps its policy and falls back to one family.
    let (ip, ips, fams, pol) = ip_fields(
        &mk_svc(&api, "prefer", json!({"ipFamilyPolicy": "PreferDualStack"}))
            .await
            .unwrap(),
    );
    assert_eq!(
        (ips, fams, pol.as_str()),
        (vec![ip], vec!["IPv4".to_string()], "PreferDualStack")
    );

    let (msg, causes) = invalid(
        mk_svc(
            &api,
            "require",
            json!({"ipFamilyPolicy": "RequireDualStack"}),
        )
        .await,
    );
    assert_eq!(
        msg,
        "Service \"require\" is invalid: spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": \
         this cluster is not configured for dual-stack services"
    );
    assert_eq!(
        causes,
        [cause(
            "spec.ipFamilyPolicy",
            "Invalid value: \"RequireDualStack\": this cluster is not configured for dual-stack services"
        )]
    );
    refused(
        mk_svc(
            &api,
            "two",
            json!({"ipFamilyPolicy": "PreferDualStack", "ipFamilies": ["IPv4", "IPv6"]}),
        )
        .await,
        "spec.ipFamilies[1]",
        "Invalid value: \"IPv6\": not configured on this cluster",
    );
    // Two families with the default policy: the policy is what is wrong.
    let (_, causes) = invalid(mk_svc(&api, "two", json!({"ipFamilies": ["IPv4", "IPv6"]})).await);
    assert_eq!(
        causes,
        [cause(
            "spec.ipFamilyPolicy",
            "Invalid value: \"SingleStack\": must be 'RequireDualStack' or 'PreferDualStack' \
             when multiple IP families are specified"
        )]
    );
    refused(
        mk_svc(&api, "six", json!({"ipFamilies": ["IPv6"]})).await,
        "spec.ipFamilies[0]",
        "Invalid value: \"IPv6\": not configured on this cluster",
    );
    refused(
        mk_svc(&api, "six", json!({"clusterIP": "fd00:10:96::5"})).await,
        "spec.clusterIPs[0]",
        "Invalid value: []string{\"fd00:10:96::5\"}: IPv6 is not configured on this cluster",
    );
    // Nothing was allocated or stored by the rejected creates.
    for name in ["require", "two", "six"] {
        assert!(api.get_opt(name).await.unwrap().is_none(), "{name}");
    }

    // Headless: clusterIPs ["None"], families still defaulted.
    let h = mk_svc(
        &api,
        "headless",
        json!({"clusterIP": "None", "selector": {"app": "x"}}),
    )
    .await
    .unwrap();
    assert_eq!(
        ip_fields(&h),
        fields("None", &["None"], &["IPv4"], "SingleStack")
    );
    // Headless and selectorless describes the user's own endpoints: both
    // families, even on a single-stack cluster.
    let h = mk_svc(&api, "manual", json!({"clusterIP": "None"}))
        .await
        .unwrap();
    assert_eq!(
        ip_fields(&h),
        fields("None", &["None"], &["IPv4", "IPv6"], "RequireDualStack")
    );
    // ExternalName gets none of these, and may not set them.
    let x = mk_svc(
        &api,
        "ext",
        json!({"type": "ExternalName", "externalName": "db.example.com", "ports": []}),
    )
    .await
    .unwrap();
    assert_eq!(ip_fields(&x), Default::default());
    let (msg, causes) = invalid(
        mk_svc(
            &api,
            "ext2",
            json!({"type": "ExternalName", "externalName": "db.example.com", "ipFamilyPolicy": "SingleStack"}),
        )
        .await,
    );
    assert_eq!(
        causes,
        [(
            "spec.ipFamilyPolicy".to_string(),
            "FieldValueForbidden".to_string(),
            "Forbidden: may not be set for ExternalName services".to_string()
        )]
    );
    assert!(
        msg.ends_with("spec.ipFamilyPolicy: Forbidden: may not be set for ExternalName services"),
        "{msg}"
    );
}

#[tokio::test]
async fn chosen_cluster_ips_are_honoured_when_free_and_in_range() {
    let sim = start(SimArgs {
        service_cidr: "10.100.0.0/16".parse().unwrap(),
        ..SimArgs::default()
    })
    .await;
    let api: Api<Service> = Api::namespaced(sim.client(), "default");
    // The `kubernetes` Service follows the configured range.
    assert_eq!(
        ip_fields(&api.get("kubernetes").await.unwrap()).0,
        "10.100.0.1"
    );
    let d = mk_svc(&api, "dns", json!({"clusterIP": "10.100.0.10"}))
        .await
        .unwrap();
    assert_eq!(ip_fields(&d).1, ["10.100.0.10"]);
    // Dynamic addresses never land on hand-picked low ones.
    for i in 0..5 {
        let ip = ip_fields(&mk_svc(&api, &format!("d{i}"), json!({})).await.unwrap()).0;
        assert!(
            in_net(&ip, "10.100.0.0/16") && !in_net(&ip, "10.100.0.0/24"),
            "{ip}"
        );
    }
    let (msg, causes) = invalid(mk_svc(&api, "again", json!({"clusterIP": "10.100.0.10"})).await);
    assert_eq!(
        causes,
        [cause(
            "spec.clusterIPs",
            "Invalid value: []string{\"10.100.0.10\"}: failed to allocate IP 10.100.0.10: \
             provided IP is already allocated"
        )]
    );
    assert!(
        msg.starts_with("Service \"again\" is invalid: spec.clusterIPs: "),
        "{msg}"
    );
    let (_, causes) = invalid(mk_svc(&api, "out", json!({"clusterIP": "10.96.0.10"})).await);
    assert_eq!(
        causes,
        [cause(
            "spec.clusterIPs",
            "Invalid value: []string{\"10.96.0.10\"}: failed to allocate IP 10.96.0.10: \
             the provided IP (10.96.0.10) is not in the valid range. The range of valid IPs is 10.100.0.0/16"
        )]
    );
    refused(
        mk_svc(&api, "bad", json!({"clusterIP": "10.100.0.300"})).await,
        "spec.clusterIPs[0]",
        "Invalid value: \"10.100.0.300\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
    );
    // Delete gives the address back.
    api.delete("dns", &DeleteParams::default()).await.unwrap();
    let d = mk_svc(&api, "dns2", json!({"clusterIP": "10.100.0.10"}))
        .await
        .unwrap();
    assert_eq!(ip_fields(&d).0, "10.100.0.10");
    // So does deleting the namespace that holds it.
    let nss: Api<Namespace> = Api::all(sim.client());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap(),
    )
    .await
    .unwrap();
    let team: Api<Service> = Api::namespaced(sim.client(), "team");
    mk_svc(&team, "pinned", json!({"clusterIP": "10.100.0.20"}))
        .await
        .unwrap();
    invalid(mk_svc(&api, "pinned", json!({"clusterIP": "10.100.0.20"})).await);
    nss.delete("team", &DeleteParams::default()).await.unwrap();
    mk_svc(&api, "pinned", json!({"clusterIP": "10.100.0.20"}))
        .await
        .unwrap();
}

#[tokio::test]
async fn dual_stack_services_get_one_ip_per_family() {
    let sim = start(dual_stack()).await;
    let api: Api<Service> = Api::namespaced(sim.client(), "default");
    // The `kubernetes` Service stays single-stack on the primary family.
    assert_eq!(ip_fields(&api.get("kubernetes").await.unwrap()).2, ["IPv4"]);
    let r = mk_svc(
        &api,
        "require",
        json!({"ipFamilyPolicy": "RequireDualStack"}),
    )
    .await
    .unwrap();
    assert_dual(&r, ["IPv4", "IPv6"], "RequireDualStack");
    let p = mk_svc(&api, "prefer", json!({"ipFamilyPolicy": "PreferDualStack"}))
        .await
        .unwrap();
    assert_dual(&p, ["IPv4", "IPv6"], "PreferDualStack");
    assert_ne!(
        ip_fields(&r).1,
        ip_fields(&p).1,
        "no address is handed out twice"
    );
    // The family order asked for decides the primary.
    let six = mk_svc(
        &api,
        "six-first",
        json!({"ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv6", "IPv4"]}),
    )
    .await
    .unwrap();
    assert_dual(&six, ["IPv6", "IPv4"], "RequireDualStack");
    // Default: SingleStack on the primary family.
    let (ip, ips, fams, pol) = ip_fields(&mk_svc(&api, "plain", json!({})).await.unwrap());
    assert!(in_net(&ip, "10.96.0.0/12"));
    assert_eq!(
        (ips.len(), fams, pol.as_str()),
        (1, vec!["IPv4".to_string()], "SingleStack")
    );
    let (ip, _, fams, _) = ip_fields(
        &mk_svc(&api, "v6", json!({"ipFamilies": ["IPv6"]}))
            .await
            .unwrap(),
    );
    assert!(in_net(&ip, "fd00:10:96::/112"), "{ip}");
    assert_eq!(fams, ["IPv6"]);
    // Families are inferred from the IPs given; both IPs are honoured.
    let pinned = mk_svc(
        &api,
        "pinned",
        json!({"ipFamilyPolicy": "RequireDualStack", "clusterIP": "fd00:10:96::53",
               "clusterIPs": ["fd00:10:96::53", "10.96.0.53"]}),
    )
    .await
    .unwrap();
    assert_eq!(
        ip_fields(&pinned),
        fields(
            "fd00:10:96::53",
            &["fd00:10:96::53", "10.96.0.53"],
            &["IPv6", "IPv4"],
            "RequireDualStack"
        )
    );
    // A given primary, the secondary allocated.
    let half = mk_svc(
        &api,
        "half",
        json!({"ipFamilyPolicy": "PreferDualStack", "clusterIP": "10.96.0.54"}),
    )
    .await
    .unwrap();
    assert_dual(&half, ["IPv4", "IPv6"], "PreferDualStack");
    assert_eq!(ip_fields(&half).0, "10.96.0.54");

    let (_, causes) = invalid(
        mk_svc(
            &api,
            "twice",
            json!({"ipFamilyPolicy": "RequireDualStack", "clusterIP": "10.96.0.60",
                   "clusterIPs": ["10.96.0.60", "10.96.0.61"]}),
        )
        .await,
    );
    assert_eq!(
        causes,
        [cause(
            "spec.clusterIPs",
            "Invalid value: []string{\"10.96.0.60\", \"10.96.0.61\"}: \
             may specify no more than one IP for each IP family"
        )]
    );
    refused(
        mk_svc(&api, "plural", json!({"clusterIPs": ["10.96.0.62"]})).await,
        "spec.clusterIPs",
        "Invalid value: []string{\"10.96.0.62\"}: must be empty when `clusterIP` is not specified",
    );
    refused(
        mk_svc(
            &api,
            "mismatch",
            json!({"ipFamilies": ["IPv6"], "clusterIP": "10.96.0.63"}),
        )
        .await,
        "spec.clusterIPs[0]",
        "Invalid value: \"10.96.0.63\": expected an IPv6 value as indicated by `ipFamilies[0]`",
    );
    // A secondary outside its range fails the whole create: the primary
    // it had allocated is free again.
    let (_, causes) = invalid(
        mk_svc(
            &api,
            "outside",
            json!({"ipFamilyPolicy": "RequireDualStack", "clusterIP": "10.96.0.64",
                   "clusterIPs": ["10.96.0.64", "fd00:99::1"]}),
        )
        .await,
    );
    assert_eq!(causes.len(), 1);
    assert!(
        causes[0]
            .2
            .ends_with("The range of valid IPs is fd00:10:96::/112"),
        "{causes:?}"
    );
    mk_svc(&api, "reuse", json!({"clusterIP": "10.96.0.64"}))
        .await
        .unwrap();

    // Headless keeps "None"; its families follow the policy.
    let h = mk_svc(
        &api,
        "headless",
        json!({"clusterIP": "None", "selector": {"app": "x"}, "ipFamilyPolicy": "RequireDualStack"}),
    )
    .await
    .unwrap();
    assert_eq!(
        ip_fields(&h),
        fields("None", &["None"], &["IPv4", "IPv6"], "RequireDualStack")
    );
    // Deleting a dual-stack Service frees both of its addresses.
    api.delete("pinned", &DeleteParams::default())
        .await
        .unwrap();
    mk_svc(
        &api,
        "pinned-again",
        json!({"ipFamilyPolicy": "RequireDualStack", "clusterIP": "10.96.0.53",
               "clusterIPs": ["10.96.0.53", "fd00:10:96::53"]}),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn service_ip_fields_change_only_as_the_apiserver_allows() {
    let sim = start(dual_stack()).await;
    let api: Api<Service> = Api::namespaced(sim.client(), "default");
    let s = mk_svc(&api, "web", json!({})).await.unwrap();
    let (v4, ..) = ip_fields(&s);
    // SingleStack → PreferDualStack adds a secondary IP, keeps the primary.
    let up = patch_svc(&api, "web", json!({"ipFamilyPolicy": "PreferDualStack"}))
        .await
        .unwrap();
    assert_dual(&up, ["IPv4", "IPv6"], "PreferDualStack");
    assert_eq!(ip_fields(&up).0, v4);
    let v6 = ip_fields(&up).1[1].clone();
    // Writing the object back unchanged changes nothing, not even its
    // resourceVersion; a manifest without the allocated fields keeps them.
    let same = api
        .replace("web", &PostParams::default(), &up)
        .await
        .unwrap();
    assert_eq!(same.metadata.resource_version, up.metadata.resource_version);
    let mut manifest = svc_body(
        "web",
        json!({"ipFamilyPolicy": "PreferDualStack", "selector": {"app": "web"}}),
    );
    manifest.metadata.resource_version = up.metadata.resource_version.clone();
    let applied = api
        .replace("web", &PostParams::default(), &manifest)
        .await
        .unwrap();
    assert_eq!(ip_fields(&applied).1, ip_fields(&up).1);
    // The primary never changes.
    let (_, causes) = invalid(patch_svc(&api, "web", json!({"clusterIP": "10.96.0.99"})).await);
    assert_eq!(
        causes[0],
        cause(
            "spec.clusterIPs[0]",
            "Invalid value: []string{\"10.96.0.99\"}: may not change once set"
        )
    );
    let (_, causes) =
        invalid(patch_svc(&api, "web", json!({"ipFamilies": ["IPv6", "IPv4"]})).await);
    assert_eq!(
        causes[0],
        cause(
            "spec.ipFamilies[0]",
            "Invalid value: []core.IPFamily{\"IPv6\", \"IPv4\"}: may not change once set"
        )
    );
    // Dropping the secondary needs SingleStack.
    refused(
        patch_svc(&api, "web", json!({"clusterIPs": [v4.clone()]})).await,
        "spec.ipFamilyPolicy",
        "Invalid value: \"PreferDualStack\": must be set to 'SingleStack' when releasing the secondary clusterIP",
    );
    let down = patch_svc(&api, "web", json!({"ipFamilyPolicy": "SingleStack"}))
        .await
        .unwrap();
    assert_eq!(
        ip_fields(&down),
        (
            v4.clone(),
            vec![v4.clone()],
            vec!["IPv4".into()],
            "SingleStack".into()
        )
    );
    // ... and gives the secondary back.
    mk_svc(
        &api,
        "takes-v6",
        json!({"ipFamilies": ["IPv6"], "clusterIP": v6.clone()}),
    )
    .await
    .unwrap();
    // SingleStack → RequireDualStack upgrades too.
    let req = patch_svc(&api, "web", json!({"ipFamilyPolicy": "RequireDualStack"}))
        .await
        .unwrap();
    assert_dual(&req, ["IPv4", "IPv6"], "RequireDualStack");
    assert_ne!(ip_fields(&req).1[1], v6, "the released IP went to takes-v6");
    // The status subresource leaves the spec alone.
    let st = api
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {}}})),
        )
        .await
        .unwrap();
    assert_eq!(ip_fields(&st), ip_fields(&req));
    // Type changes: to ExternalName drops and releases everything, back to
    // ClusterIP allocates afresh.
    let x = patch_svc(
        &api,
        "web",
        json!({"type": "ExternalName", "externalName": "web.example.com"}),
    )
    .await
    .unwrap();
    assert_eq!(ip_fields(&x), Default::default());
    mk_svc(&api, "takes-v4", json!({"clusterIP": v4.clone()}))
        .await
        .unwrap();
    let back = patch_svc(
        &api,
        "web",
        json!({"type": "ClusterIP", "externalName": null}),
    )
    .await
    .unwrap();
    let (ip, ips, fams, pol) = ip_fields(&back);
    assert_ne!(ip, v4);
    assert_eq!(
        (ips.len(), fams, pol.as_str()),
        (1, vec!["IPv4".to_string()], "SingleStack")
    );
    // Headless stays headless.
    mk_svc(
        &api,
        "h",
        json!({"clusterIP": "None", "selector": {"app": "h"}}),
    )
    .await
    .unwrap();
    let (_, causes) = invalid(patch_svc(&api, "h", json!({"clusterIP": "10.96.0.77"})).await);
    assert_eq!(causes[0].0, "spec.clusterIPs[0]");
}

#[tokio::test]
async fn single_stack_updates_reject_dual_stack() {
    let sim = start_default().await;
    let api: Api<Service> = Api::namespaced(sim.client(), "default");
    let s = mk_svc(&api, "web", json!({})).await.unwrap();
    refused(
        patch_svc(&api, "web", json!({"ipFamilyPolicy": "RequireDualStack"})).await,
        "spec.ipFamilyPolicy",
        "Invalid value: \"RequireDualStack\": this cluster is not configured for dual-stack services",
    );
    // PreferDualStack is accepted and stays single-stack here.
    let p = patch_svc(&api, "web", json!({"ipFamilyPolicy": "PreferDualStack"}))
        .await
        .unwrap();
    assert_eq!(ip_fields(&p).1, ip_fields(&s).1);
    assert_eq!(ip_fields(&p).2, ["IPv4"]);
    // The failed write changed nothing.
    assert_eq!(ip_fields(&api.get("web").await.unwrap()), ip_fields(&p));
}
