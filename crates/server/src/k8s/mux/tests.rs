use super::*;

fn frames(bytes: &[u8]) -> Result<Vec<Outer>, MuxError> {
    let mut d = Decoder::default();
    d.push(bytes);
    let mut out = Vec::new();
    while let Some(f) = d.next_frame()? {
        out.push(f);
    }
    d.finish()?;
    Ok(out)
}

fn data(index: usize, bytes: &[u8]) -> Vec<u8> {
    let mut out = data_head(index, bytes.len()).to_vec();
    out.extend_from_slice(bytes);
    out
}

#[test]
fn frames_come_back_as_sent_in_any_chunking() {
    let mut stream = data(0, b"hello");
    stream.extend(data(3, &[7u8; 300]));
    stream.extend_from_slice(&end_frame(3, None));
    stream.extend_from_slice(&end_frame(0, Some(br#"{"code":403}"#)));
    stream.extend(data(130, b""));
    let want = vec![
        Outer::Data(0, Bytes::from_static(b"hello")),
        Outer::Data(3, Bytes::from(vec![7u8; 300])),
        Outer::End(3, None),
        Outer::End(0, Some(Bytes::from_static(br#"{"code":403}"#))),
        Outer::Data(130, Bytes::new()),
    ];
    assert_eq!(frames(&stream).unwrap(), want);
    // Byte by byte: the same frames.
    let mut d = Decoder::default();
    let mut got = Vec::new();
    for b in &stream {
        d.push(std::slice::from_ref(b));
        while let Some(f) = d.next_frame().unwrap() {
            got.push(f);
        }
    }
    d.finish().unwrap();
    assert_eq!(got, want);
}

#[test]
fn bad_streams_are_errors_not_panics() {
    let whole = data(1, b"abcdef");
    // Cut anywhere inside: truncated at the end.
    for cut in 1..whole.len() {
        let err = frames(&whole[..cut]).unwrap_err();
        assert!(matches!(err, MuxError::Truncated(_)), "{cut}: {err:?}");
        assert_eq!(err.label(), "truncated");
    }
    // Over the bound, before its bytes come.
    let mut big = Vec::new();
    put_varint(&mut big, (MAX_OUTER + 1) as u64);
    assert_eq!(
        frames(&big).unwrap_err(),
        MuxError::TooLarge((MAX_OUTER + 1) as u64)
    );
    // A length that is no number.
    assert_eq!(frames(&[0xff; 6]).unwrap_err(), MuxError::BadLength);
    // Empty body; a tag with no index; an unknown tag.
    assert_eq!(frames(&[0]).unwrap_err(), MuxError::Short);
    assert_eq!(frames(&[1, TAG_DATA]).unwrap_err(), MuxError::Short);
    assert_eq!(frames(&[2, 9, 0]).unwrap_err(), MuxError::UnknownTag(9));
    // Arbitrary bytes never panic.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..2000 {
        let mut junk = Vec::new();
        for _ in 0..(seed % 40) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            junk.push(seed as u8);
        }
        let _ = frames(&junk);
    }
}

#[test]
fn the_request_names_each_watch_in_order() {
    let t = vec![
        "/api/v1/namespaces/ml/pods?watch=true&resourceVersion=5".to_owned(),
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&watch=true".to_owned(),
    ];
    let uri: http::Uri = request_uri(&t).parse().unwrap();
    assert_eq!(uri.path(), MUX_PATH);
    let q: Vec<(String, String)> = serde_urlencoded::from_str(uri.query().unwrap()).unwrap();
    assert_eq!(
        q,
        vec![("w".into(), t[0].clone()), ("w".into(), t[1].clone())]
    );
}
