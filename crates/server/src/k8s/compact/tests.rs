use super::*;

/// Objects alike in their keys, as a relay's pods are.
fn samples(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            format!(
                "metadata name=train-{i}-abcde namespace=team-{} labels batch.kubernetes.io/job-name=train-{} \
                 batch.kubernetes.io/job-completion-index={i} jobset.sigs.k8s.io/replicatedjob-name=workers \
                 spec nodeName=gpu-node-{i:05} status podIP=10.0.{}.{}",
                i % 7,
                i % 7,
                i / 250,
                i % 250
            )
            .into_bytes()
        })
        .collect()
}

fn dict(id: u32) -> Arc<Dict> {
    let s = samples(400);
    let refs: Vec<&[u8]> = s.iter().map(Vec::as_slice).collect();
    Arc::new(Dict::train(id, &refs, 4096).expect("trains"))
}

/// `p`'s whole event frame.
fn event(ty: EvType, p: &Packed) -> Vec<u8> {
    let mut f = event_head(ty, p).to_vec();
    f.extend_from_slice(&p.data);
    f
}

fn decode_all(stream: &[u8]) -> Result<Vec<Decoded>, DecodeError> {
    decode_with(&mut Decoder::default(), stream)
}

#[test]
fn events_round_trip_with_and_without_a_dictionary_and_split_anywhere() {
    let d = dict(7);
    let s = samples(3);
    let mut stream = d.frame().to_vec();
    let a = pack(&s[0], Some(&d));
    let b = pack(&s[1], None);
    stream.extend(event(EvType::Added, &a));
    stream.extend(event(EvType::Deleted, &b));
    let pb = [0, 0, 0, 3, 10, 1, b'x'];
    stream.extend_from_slice(&protobuf_frame(&pb));
    let want = vec![
        Decoded::Event(EvType::Added, s[0].clone()),
        Decoded::Event(EvType::Deleted, s[1].clone()),
        Decoded::Protobuf(vec![10, 1, b'x']),
    ];
    assert_eq!(decode_all(&stream).unwrap(), want);
    // Byte by byte: each frame comes out once it is whole.
    let mut dec = Decoder::default();
    let mut got = Vec::new();
    for byte in &stream {
        dec.push(std::slice::from_ref(byte));
        while let Some(x) = dec.next_event().unwrap() {
            got.push(x);
        }
    }
    assert_eq!(got, want);
    assert!(a.data.len() < s[0].len() / 2, "the dictionary pays");
}

#[test]
fn a_stream_that_ends_inside_a_frame_is_truncated() {
    let d = dict(1);
    let mut stream = d.frame().to_vec();
    stream.extend(event(EvType::Added, &pack(&samples(1)[0], Some(&d))));
    stream.pop();
    assert!(matches!(
        decode_all(&stream),
        Err(DecodeError::Truncated(_))
    ));
}

#[test]
fn a_dictionary_never_sent_is_refused() {
    let d = dict(3);
    let stream = event(EvType::Modified, &pack(&samples(1)[0], Some(&d)));
    assert_eq!(decode_all(&stream), Err(DecodeError::UnknownDict(3)));
}

#[test]
fn an_object_larger_than_declared_is_refused() {
    let s = samples(1);
    let mut p = pack(&s[0], None);
    p.size -= 1;
    let err = decode_all(&event(EvType::Added, &p)).unwrap_err();
    assert!(matches!(err, DecodeError::Corrupt { .. }), "{err}");
    // And smaller.
    p.size += 2;
    let err = decode_all(&event(EvType::Added, &p)).unwrap_err();
    assert!(matches!(err, DecodeError::Corrupt { .. }), "{err}");
}

#[test]
fn sizes_over_the_limits_are_refused_before_any_allocation() {
    // A frame declaring 5 MiB.
    let mut big = Vec::new();
    put_varint(&mut big, (MAX_FRAME + 1) as u64);
    assert!(matches!(
        decode_all(&big),
        Err(DecodeError::FrameTooLarge(_))
    ));
    // An object declaring 5 MiB, decompressing to a few bytes.
    let mut p = pack(b"tiny", None);
    p.size = MAX_OBJECT + 1;
    assert!(matches!(
        decode_all(&event(EvType::Added, &p)),
        Err(DecodeError::ObjectTooLarge(_))
    ));
    // A length that never ends.
    assert_eq!(decode_all(&[0xff; 6]), Err(DecodeError::BadLength));
}

#[test]
fn corrupt_data_unknown_tags_and_types_are_refused() {
    let s = samples(1);
    let p = pack(&s[0], None);
    let mut f = event(EvType::Added, &p);
    let last = f.len() - 1;
    f[last - 2..].fill(0xee);
    assert!(matches!(decode_all(&f), Err(DecodeError::Corrupt { .. })));
    assert_eq!(decode_all(&[2, 9, 0]), Err(DecodeError::UnknownTag(9)));
    assert_eq!(
        decode_all(&[2, TAG_EVENT, 5]),
        Err(DecodeError::UnknownType(5))
    );
    assert_eq!(decode_all(&[1, TAG_EVENT]), Err(DecodeError::Short));
    assert_eq!(decode_all(&[0]), Err(DecodeError::Short));
    // A dictionary of id 0, or garbage as a dictionary.
    assert!(matches!(
        decode_all(&[3, TAG_DICT, 0, 1]),
        Err(DecodeError::BadDict(_))
    ));
}

#[test]
fn a_stream_holds_a_bounded_number_of_dictionaries() {
    let mut stream = Vec::new();
    for id in 1..=MAX_DICTS as u32 + 1 {
        stream.extend_from_slice(&Dict::new(id, b"raw content dictionary").unwrap().frame());
    }
    assert_eq!(decode_all(&stream), Err(DecodeError::TooManyDicts));
    // The same id again replaces it: not one more.
    let again: Vec<u8> = (0..MAX_DICTS + 4)
        .flat_map(|_| Dict::new(5, b"raw").unwrap().frame().to_vec())
        .collect();
    assert_eq!(decode_all(&again), Ok(vec![]));
}

#[test]
fn only_an_accept_that_names_it_first_gets_the_compact_stream() {
    let kube = "application/vnd.kubernetes.protobuf, application/json";
    assert!(!preferred(Some(kube)));
    assert!(!preferred(None));
    assert!(!preferred(Some("*/*")));
    assert!(preferred(Some(&format!("{COMPACT}, {kube}"))));
    assert!(!preferred(Some(&format!("{kube}, {COMPACT}"))));
    assert!(preferred(Some(&format!(
        "application/json;q=0.5, {COMPACT};q=0.9"
    ))));
    assert!(!preferred(Some(&format!(
        "{COMPACT};q=0, application/json"
    ))));
}

#[test]
fn decode_errors_are_found_inside_watch_errors() {
    let e = kube::Error::ReadEvents(std::io::Error::other(DecodeError::UnknownDict(4)));
    assert_eq!(DecodeError::of(&e), Some(&DecodeError::UnknownDict(4)));
    assert_eq!(DecodeError::UnknownDict(4).label(), "dictionary");
    let other = kube::Error::ReadEvents(std::io::Error::other("reset"));
    assert_eq!(DecodeError::of(&other), None);
}

/// Every event of `stream` through `d`, which is then finished.
fn decode_with(d: &mut Decoder, stream: &[u8]) -> Result<Vec<Decoded>, DecodeError> {
    d.push(stream);
    let mut out = Vec::new();
    while let Some(x) = d.next_event()? {
        out.push(x);
    }
    d.finish()?;
    Ok(out)
}

#[test]
fn a_dictionary_held_from_an_earlier_stream_is_named_not_sent_again() {
    let held = Arc::new(Held::default());
    let d = dict(7);
    let s = samples(2);
    // The first stream claims nothing and is sent the dictionary: kept.
    let (mut first, ids) = held.claim();
    assert_eq!(ids, Vec::<u64>::new());
    let mut stream = d.frame().to_vec();
    stream.extend(event(EvType::Added, &pack(&s[0], Some(&d))));
    assert_eq!(
        decode_with(&mut first, &stream).unwrap(),
        vec![Decoded::Event(EvType::Added, s[0].clone())]
    );
    assert_eq!(held.ids(), vec![d.content]);
    // The next claims it in its Accept, and the relay reads the claim.
    let (mut second, ids) = held.claim();
    assert_eq!(ids, vec![d.content]);
    let accept = format!(
        "{}, application/vnd.kubernetes.protobuf",
        accept_holding(&ids)
    );
    assert!(preferred(Some(&accept)), "still the compact stream first");
    assert_eq!(claimed(Some(&accept)), vec![d.content]);
    // So it is sent the dictionary's number and content id: 11 bytes
    // instead of the dictionary's.
    let named = d.held_frame();
    assert!(named.len() <= 12 && d.frame().len() > 500, "{named:?}");
    let mut stream = named.to_vec();
    stream.extend(event(EvType::Modified, &pack(&s[1], Some(&d))));
    assert_eq!(
        decode_with(&mut second, &stream).unwrap(),
        vec![Decoded::Event(EvType::Modified, s[1].clone())]
    );
}

#[test]
fn a_dictionary_named_as_held_but_not_claimed_is_refused() {
    let d = dict(2);
    let mut stream = d.held_frame().to_vec();
    stream.extend(event(EvType::Added, &pack(&samples(1)[0], Some(&d))));
    // A decoder that claimed nothing (an older node instance's, or one
    // whose request named no dictionaries).
    assert_eq!(decode_all(&stream), Err(DecodeError::NotHeld(d.content)));
    assert_eq!(DecodeError::NotHeld(d.content).label(), "dictionary");
    // One that claimed another dictionary.
    let held = Arc::new(Held::default());
    held.keep(content_id(b"another"), b"another");
    let (mut dec, ids) = held.claim();
    assert_eq!(ids.len(), 1);
    assert_eq!(
        decode_with(&mut dec, &stream),
        Err(DecodeError::NotHeld(d.content))
    );
    // A dictionary kept after the claim is not claimed by it.
    let held = Arc::new(Held::default());
    let (mut early, _) = held.claim();
    held.keep(d.content, &[]);
    assert_eq!(
        decode_with(&mut early, &stream),
        Err(DecodeError::NotHeld(d.content))
    );
    // A held frame cut short, or of number 0.
    let mut cut = vec![9, TAG_HELD, 1];
    cut.extend_from_slice(&[0; 7]);
    assert_eq!(decode_all(&cut), Err(DecodeError::Short));
    let mut zero = vec![10, TAG_HELD, 0];
    zero.extend_from_slice(&[0; 8]);
    assert!(matches!(decode_all(&zero), Err(DecodeError::BadDict(_))));
}

#[test]
fn content_ids_are_the_same_in_every_process() {
    // SHA-256's first 64 bits: no seed, no process of its own.
    assert_eq!(
        content_id(b"podns compact dictionary"),
        0x93a8_2b28_ff72_29cb
    );
    assert_eq!(content_id(b""), 0xe3b0_c442_98fc_1c14);
    // Two relays (or one after a restart) that train the same bytes give
    // the same id, whatever number each gives it.
    let (a, b) = (dict(1), dict(40));
    assert_eq!(a.content, b.content);
    assert_ne!(a.content, Dict::new(1, b"other bytes").unwrap().content);
}

#[test]
fn held_dictionaries_are_bounded_and_the_least_recently_used_goes() {
    let held = Arc::new(Held::default());
    let raw = |i: usize| format!("dictionary {i}").into_bytes();
    for i in 0..=MAX_HELD {
        held.keep(content_id(&raw(i)), &raw(i));
    }
    let ids = held.ids();
    assert_eq!(ids.len(), MAX_HELD);
    assert!(!ids.contains(&content_id(&raw(0))), "the oldest went");
    // A stream that uses the oldest left keeps it: the next goes instead.
    let (mut dec, _) = held.claim();
    let d = Arc::new(Dict::new(3, &raw(1)).unwrap());
    let mut stream = d.held_frame().to_vec();
    stream.extend(event(EvType::Added, &pack(b"an object", Some(&d))));
    decode_with(&mut dec, &stream).unwrap();
    held.keep(content_id(&raw(99)), &raw(99));
    let ids = held.ids();
    assert!(ids.contains(&content_id(&raw(1))));
    assert!(!ids.contains(&content_id(&raw(2))));
    // What a stream claimed it keeps, whatever is dropped meanwhile.
    let (mut dec, _) = held.claim();
    for i in 100..100 + MAX_HELD {
        held.keep(content_id(&raw(i)), &raw(i));
    }
    assert!(!held.ids().contains(&content_id(&raw(1))));
    let mut again = d.held_frame().to_vec();
    again.extend(event(EvType::Added, &pack(b"an object", Some(&d))));
    assert_eq!(
        decode_with(&mut dec, &again).unwrap(),
        vec![Decoded::Event(EvType::Added, b"an object".to_vec())]
    );
    // Bytes are bounded too: a dictionary over the bound is not kept,
    // and large ones push the others out.
    let big = vec![7u8; MAX_HELD_BYTES + 1];
    held.keep(content_id(&big), &big);
    assert!(!held.ids().contains(&content_id(&big)));
    let half = vec![8u8; MAX_HELD_BYTES / 2 + 1];
    held.keep(content_id(&half), &half);
    let other = vec![9u8; MAX_HELD_BYTES / 2 + 1];
    held.keep(content_id(&other), &other);
    assert_eq!(held.ids(), vec![content_id(&other)]);
}

#[test]
fn a_claim_is_read_from_the_compact_type_only_and_bounded() {
    let ids: Vec<u64> = (1..=MAX_CLAIMED as u64 + 4).collect();
    let accept = format!("{}, application/json", accept_holding(&ids));
    assert_eq!(claimed(Some(&accept)), ids[..MAX_CLAIMED].to_vec());
    assert_eq!(claimed(Some(COMPACT)), Vec::<u64>::new());
    assert_eq!(claimed(None), Vec::<u64>::new());
    // Another type's parameter, or ids not 16 hex digits, are no claim.
    assert_eq!(
        claimed(Some("application/json;dicts=0000000000000001")),
        Vec::<u64>::new()
    );
    assert_eq!(
        claimed(Some(&format!(
            "{COMPACT};dicts=1.zz00000000000000.00000000000000ff"
        ))),
        vec![0xff]
    );
    assert_eq!(accept_holding(&[]), COMPACT);
}

/// Seeds for the `compact` fuzz target (`fuzz/corpus/compact`), written
/// by `PODNS_WRITE_SEEDS=fuzz/corpus/compact cargo test -p podns-server
/// --lib write_fuzz_seeds -- --ignored` from the repository root), as
/// the relay would send them: a dictionary, then events of real pods'
/// Protobuf with it and without, a bookmark; and cut or bent copies.
#[test]
#[ignore]
fn write_fuzz_seeds() {
    let Ok(dir) = std::env::var("PODNS_WRITE_SEEDS") else {
        return;
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(dir);
    std::fs::create_dir_all(&dir).unwrap();
    let pod = podns_kapi::pbenc::list_item(
        podns_kapi::Kind::Pod,
        br#"{"metadata":{"name":"train-3","namespace":"ml","resourceVersion":"7","labels":{"batch.kubernetes.io/job-name":"train"}},"spec":{"nodeName":"n1","hostname":"train-3","subdomain":"train"},"status":{"podIP":"10.0.0.3","phase":"Running"}}"#,
    )
    .unwrap();
    let raw = podns_kapi::pbenc::object(&pod).unwrap().to_vec();
    let d = dict(1);
    let mut whole = d.frame().to_vec();
    whole.extend(event(EvType::Added, &pack(&raw, Some(&d))));
    whole.extend(event(EvType::Deleted, &pack(&raw, None)));
    let bookmark = podns_kapi::pbenc::watch_frame(
        "BOOKMARK",
        podns_kapi::pbenc::bookmark_object(podns_kapi::Kind::Pod, 9, true),
    );
    whole.extend_from_slice(&protobuf_frame(&bookmark));
    let plain = event(EvType::Modified, &pack(&raw, None));
    let mut bent = whole.clone();
    let mid = bent.len() / 2;
    bent[mid] ^= 0x40;
    let seeds: [(&str, Vec<u8>); 6] = [
        ("stream", whole.clone()),
        ("plain-event", plain),
        ("cut", whole[..whole.len() - 7].to_vec()),
        ("bent", bent),
        ("no-dictionary", whole[d.frame().len()..].to_vec()),
        ("bookmark", protobuf_frame(&bookmark).to_vec()),
    ];
    for (name, bytes) in seeds {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}

#[test]
fn held_dictionaries_restored_in_another_process_are_claimed_as_before() {
    // What a node instance saves: its dictionaries, least recently used
    // first. Restored in a new `Held` (a restart), in the same order,
    // under the same content ids.
    let a = b"the pods' dictionary";
    let b = Arc::new(Dict::new(2, b"the services' dictionary").unwrap());
    let held = Arc::new(Held::default());
    held.keep(content_id(a), a);
    held.keep(b.content, b"the services' dictionary");
    let saved = held.dicts();
    let again = Arc::new(Held::default());
    assert_eq!(again.restore(saved.iter().map(|d| &d[..])), 2);
    assert_eq!(again.ids(), held.ids());
    assert_eq!(again.ids(), vec![content_id(a), b.content]);
    // Its first stream claims them and reads a `4` frame of each.
    let (mut dec, ids) = again.claim();
    assert_eq!(ids, again.ids());
    let mut stream = b.held_frame().to_vec();
    stream.extend(event(EvType::Added, &pack(b"an object", Some(&b))));
    assert_eq!(
        decode_with(&mut dec, &stream).unwrap(),
        vec![Decoded::Event(EvType::Added, b"an object".to_vec())]
    );
    // Bounded as kept dictionaries are; one zstd refuses (its magic, then
    // nonsense) or over MAX_DICT is not held.
    let mut broken = 0xEC30_A437u32.to_le_bytes().to_vec();
    broken.extend_from_slice(&[0xff; 40]);
    let big = vec![3u8; MAX_DICT + 1];
    let many: Vec<Vec<u8>> = (0..MAX_HELD + 3)
        .map(|i| format!("dictionary {i}").into_bytes())
        .collect();
    let fresh = Held::default();
    let n = fresh.restore(
        [&broken[..], &big[..]]
            .into_iter()
            .chain(many.iter().map(Vec::as_slice)),
    );
    assert_eq!(n, MAX_HELD);
    assert!(!fresh.ids().contains(&content_id(&broken)));
    assert_eq!(
        fresh.ids().last(),
        Some(&content_id(many.last().unwrap())),
        "the most recently used last"
    );
}
