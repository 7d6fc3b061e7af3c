use nvmedb::db::BufferSize;
use nvmedb::io::{DirStorage, FileOptions};
use nvmedb::{BufferPolicy, Database, Options};
use std::sync::Arc;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let workers: usize = args.get(1).map_or(32, |s| s.parse().unwrap());
    let reps: usize = args.get(2).map_or(5, |s| s.parse().unwrap());
    let st: Arc<dyn nvmedb::io::Storage> =
        Arc::new(DirStorage::new("nvmedb-data/tpch/sf1-p16k", FileOptions::default()).unwrap());
    for _ in 0..reps {
        let o = Options {
            table_page_size: 16384,
            index_page_size: 16384,
            table_buffer: BufferSize::Bytes(256 << 20),
            index_buffer: BufferSize::Bytes(256 << 20),
            policy: BufferPolicy::parse("sep", workers).unwrap(),
            wal: false,
            ..Options::default()
        };
        let db = Database::open_with_storage(st.clone(), o).unwrap();
        db.table_pool().prefault().unwrap();
        let out = nvmedb_lab::workload::tpch::q3(&db, &Default::default(), workers, 64).unwrap();
        let pages = 62000.0;
        println!(
            "{:.3} s {:.0} pages/s phases {:?} cpu {:?}",
            out.seconds,
            pages / out.seconds,
            out.phase_s,
            out.phase_cpu_s
        );
    }
}
