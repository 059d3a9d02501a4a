use super::*;

struct Object(String);
impl Drop for Object {
    fn drop(&mut self) {
        let _ = nix::sys::mman::shm_unlink(self.0.as_str());
    }
}

fn object(name: &str, len: usize) -> Object {
    let path = format!("/ig_test_{name}_{}", std::process::id());
    let fd = shm_open(
        path.as_str(),
        OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL,
        Mode::S_IRUSR | Mode::S_IWUSR,
    )
    .unwrap();
    nix::unistd::ftruncate(&fd, len as i64).unwrap();
    Object(path)
}

#[test]
fn keys() {
    assert!(validate_key("r", "/ok").is_ok());
    assert!(validate_key("r", "///").is_err());
    assert!(validate_key("r", "/a/b").is_err());
    assert!(validate_key("r", "/..").is_err());
    assert!(validate_key("r", "/triton_python_backend_shm_region_1").is_err());
}

#[test]
fn offsets_are_page_multiples() {
    let obj = object("rw", 3 * 4096);
    let a = SystemRegion::open("a", &obj.0, 0, 3 * 4096).unwrap();
    let data: Vec<u8> = (0..3 * 4096u32).map(|i| (i % 251) as u8).collect();
    a.write(0, &data).unwrap();
    let b = SystemRegion::open("b", &obj.0, 4096, 100).unwrap();
    assert_eq!(&b.read(3, 10).unwrap()[..], &data[4099..4109]);
    b.write(0, &[7, 7]).unwrap();
    assert_eq!(&a.read(4096, 3).unwrap()[..], &[7, 7, data[4098]]);
    for (offset, size) in [(4100, 100), (1, 8), (0, 0)] {
        assert_eq!(
            SystemRegion::open("c", &obj.0, offset, size)
                .unwrap_err()
                .message,
            "failed to register shared memory region 'c': unable to process address spaceInvalid argument"
        );
    }
}

#[test]
fn bounds_are_enforced() {
    let obj = object("bounds", 4096);
    assert!(SystemRegion::open("x", &obj.0, 4000, 200).is_err());
    assert!(SystemRegion::open("x", &obj.0, u64::MAX, 2).is_err());
    let r = SystemRegion::open("x", &obj.0, 0, 4000).unwrap();
    assert!(r.read(0, 4000).is_ok());
    assert!(r.read(1, 4000).is_err());
    assert!(r.read(u64::MAX, 2).is_err());
    assert!(r.write(3999, &[1, 2]).is_err());
    assert!(
        SystemRegion::open("x", "/ig_missing_object", 0, 1)
            .unwrap_err()
            .message
            .starts_with("Unable to open")
    );
}

#[test]
fn a_truncated_object_is_refused_not_a_crash() {
    let obj = object("shrink", 8192);
    let r = SystemRegion::open("s", &obj.0, 0, 8192).unwrap();
    let fd = shm_open(obj.0.as_str(), OFlag::O_RDWR, Mode::empty()).unwrap();
    nix::unistd::ftruncate(&fd, 100).unwrap();
    assert!(r.read(0, 8192).is_err());
    assert!(r.read(0, 50).is_ok());
}

#[test]
fn a_fault_on_a_shrunk_object_poisons_the_region_instead_of_killing_the_process() {
    let obj = object("fault", 1 << 16);
    let r = SystemRegion::open("fault", &obj.0, 0, 1 << 16).unwrap();
    let fd = shm_open(obj.0.as_str(), OFlag::O_RDWR, Mode::empty()).unwrap();
    nix::unistd::ftruncate(&fd, 0).unwrap();
    // Touch the mapping past the object's new end directly, as a copy racing the shrink
    // would after passing the size check.
    let mut out = vec![1u8; 1 << 16];
    // SAFETY: inside the region's live mapping; the page is gone, which is the point.
    unsafe { std::ptr::copy_nonoverlapping(r.base.as_ptr(), out.as_mut_ptr(), out.len()) };
    assert!(
        out.iter().all(|&b| b == 0),
        "the faulting pages read as zeros"
    );
    assert!(r.guard.as_ref().is_some_and(Guard::poisoned));
    nix::unistd::ftruncate(&fd, 1 << 16).unwrap();
    let err = r.read(0, 16).unwrap_err();
    assert!(err.message.contains("truncated"), "{}", err.message);
}

#[test]
fn an_owner_shrinking_the_object_during_copies_never_crashes() {
    // Without the guard, this race raises SIGBUS in the copying thread and ends the test
    // process; with it, each copy either succeeds or is refused, and a region that took a
    // fault stays refused.
    let obj = object("race", 1 << 22);
    let r = SystemRegion::open("race", &obj.0, 0, 1 << 22).unwrap();
    let fd = shm_open(obj.0.as_str(), OFlag::O_RDWR, Mode::empty()).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut refused = 0;
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..20_000 {
                let len = if i % 2 == 0 { 4096 } else { 1 << 22 };
                nix::unistd::ftruncate(&fd, len).unwrap();
            }
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            if let Err(e) = r.read(0, 1 << 22) {
                assert!(e.message.contains("truncated"), "{}", e.message);
                refused += 1;
            }
            let _ = r.write(0, &[7; 1 << 16]);
        }
    });
    assert!(refused > 0);
    if r.guard.as_ref().is_some_and(Guard::poisoned) {
        nix::unistd::ftruncate(&fd, 1 << 22).unwrap();
        assert!(r.read(0, 16).is_err(), "a poisoned region stays refused");
    }
}
