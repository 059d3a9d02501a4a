//! libstdc++'s `std::sort`, step for step, for the classification extension.
//!
//! Triton orders classes with `std::sort` and the comparator `value[a] > value[b]`. That sort is
//! not stable: above 16 elements, equal values come out in an order only its algorithm decides
//! (introsort: median-of-three quicksort down to runs of 16, heapsort past a depth limit, then
//! one insertion sort), and NaN, which compares false with everything, lands where that
//! algorithm leaves it. Clients see the indices, so the sidecar runs the same algorithm. The
//! steps that libstdc++ leaves unguarded (they rely on the comparator being a strict weak order,
//! which NaN breaks) are bounded here: on such input the order may then differ from Triton's,
//! whose behaviour is undefined there, but it never reads outside the slice.
//!
//! `tests/data/cxx_sort_order.txt` holds orders printed by libstdc++ itself (the program that
//! made them is beside it); the tests below compare with them.

/// Runs of at most this many elements are left to the final insertion sort.
const THRESHOLD: usize = 16;

/// Sorts `v` as `std::sort(v.begin(), v.end(), less)` does.
pub fn sort<T: Copy>(v: &mut [T], less: impl Fn(&T, &T) -> bool) {
    if v.len() < 2 {
        return;
    }
    let depth_limit = 2 * v.len().ilog2() as usize;
    introsort_loop(v, depth_limit, &less);
    final_insertion_sort(v, &less);
}

fn introsort_loop<T: Copy>(
    mut v: &mut [T],
    mut depth_limit: usize,
    less: &impl Fn(&T, &T) -> bool,
) {
    while v.len() > THRESHOLD {
        if depth_limit == 0 {
            heap_sort(v, less);
            return;
        }
        depth_limit -= 1;
        let cut = partition_pivot(v, less);
        let (left, right) = v.split_at_mut(cut);
        introsort_loop(right, depth_limit, less);
        v = left;
    }
}

/// `__unguarded_partition_pivot`: the median of the second, middle and last elements moved to
/// the front, then a Hoare partition of the rest around it. Returns where the right part starts.
fn partition_pivot<T: Copy>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) -> usize {
    let len = v.len();
    move_median_to_first(v, 1, len / 2, len - 1, less);
    let mut first = 1;
    let mut last = len;
    loop {
        while first < len && less(&v[first], &v[0]) {
            first += 1;
        }
        last -= 1;
        while last > 0 && less(&v[0], &v[last]) {
            last -= 1;
        }
        if first >= last {
            return first;
        }
        v.swap(first, last);
        first += 1;
    }
}

fn move_median_to_first<T: Copy>(
    v: &mut [T],
    a: usize,
    b: usize,
    c: usize,
    less: &impl Fn(&T, &T) -> bool,
) {
    let median = if less(&v[a], &v[b]) {
        if less(&v[b], &v[c]) {
            b
        } else if less(&v[a], &v[c]) {
            c
        } else {
            a
        }
    } else if less(&v[a], &v[c]) {
        a
    } else if less(&v[b], &v[c]) {
        c
    } else {
        b
    };
    v.swap(0, median);
}

fn final_insertion_sort<T: Copy>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    if v.len() > THRESHOLD {
        insertion_sort(&mut v[..THRESHOLD], less);
        for i in THRESHOLD..v.len() {
            linear_insert(v, i, less);
        }
    } else {
        insertion_sort(v, less);
    }
}

fn insertion_sort<T: Copy>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    for i in 1..v.len() {
        if less(&v[i], &v[0]) {
            // Smaller than the first: everything before it moves up one.
            v[..=i].rotate_right(1);
        } else {
            linear_insert(v, i, less);
        }
    }
}

/// `__unguarded_linear_insert`: moves `v[i]` down past every element it is less than.
fn linear_insert<T: Copy>(v: &mut [T], mut i: usize, less: &impl Fn(&T, &T) -> bool) {
    let value = v[i];
    while i > 0 && less(&value, &v[i - 1]) {
        v[i] = v[i - 1];
        i -= 1;
    }
    v[i] = value;
}

/// `std::__partial_sort(first, last, last)`: `make_heap`, then `sort_heap`.
fn heap_sort<T: Copy>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    let len = v.len();
    if len >= 2 {
        let mut parent = (len - 2) / 2;
        loop {
            let value = v[parent];
            adjust_heap(v, parent, len, value, less);
            if parent == 0 {
                break;
            }
            parent -= 1;
        }
    }
    let mut last = len;
    while last > 1 {
        last -= 1;
        // `__pop_heap(first, last, last)`.
        let value = v[last];
        v[last] = v[0];
        adjust_heap(v, 0, last, value, less);
    }
}

fn adjust_heap<T: Copy>(
    v: &mut [T],
    mut hole: usize,
    len: usize,
    value: T,
    less: &impl Fn(&T, &T) -> bool,
) {
    let top = hole;
    let mut child = hole;
    while child < (len - 1) / 2 {
        child = 2 * (child + 1);
        if less(&v[child], &v[child - 1]) {
            child -= 1;
        }
        v[hole] = v[child];
        hole = child;
    }
    if len.is_multiple_of(2) && child == (len - 2) / 2 {
        child = 2 * (child + 1);
        v[hole] = v[child - 1];
        hole = child - 1;
    }
    // `__push_heap`.
    let mut parent = hole.wrapping_sub(1) / 2;
    while hole > top && less(&v[parent], &value) {
        v[hole] = v[parent];
        hole = parent;
        parent = hole.wrapping_sub(1) / 2;
    }
    v[hole] = value;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(values: &[f64]) -> Vec<usize> {
        let mut idx: Vec<usize> = (0..values.len()).collect();
        sort(&mut idx, |&a, &b| values[a] > values[b]);
        idx
    }

    #[test]
    fn orders_are_libstdcxx() {
        let table = include_str!("../../tests/data/cxx_sort_order.txt");
        let mut checked = 0;
        for line in table
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let (given, sorted) = line.split_once(" | ").expect("a line of the table");
            let (heap, numbers) = match given.strip_prefix("heap ") {
                Some(rest) => (true, rest),
                None => (false, given),
            };
            let values: Vec<f64> = numbers
                .split(' ')
                .map(|w| {
                    if w == "nan" {
                        f64::NAN
                    } else {
                        w.parse().expect("a number")
                    }
                })
                .collect();
            let got = if heap {
                let mut idx: Vec<usize> = (0..values.len()).collect();
                heap_sort(&mut idx, &|&a: &usize, &b: &usize| values[a] > values[b]);
                idx
            } else {
                order(&values)
            };
            let got: Vec<String> = got.iter().map(usize::to_string).collect();
            assert_eq!(got.join(" "), sorted, "values {given}");
            checked += 1;
        }
        assert!(checked >= 150, "the table has {checked} rows");
    }

    #[test]
    fn nan_never_leaves_the_slice() {
        for n in [17, 40, 333] {
            let values: Vec<f64> = (0..n)
                .map(|i| if i % 3 == 0 { f64::NAN } else { (i % 7) as f64 })
                .collect();
            let mut idx = order(&values);
            idx.sort_unstable();
            assert!(idx.iter().copied().eq(0..n));
        }
    }
}
