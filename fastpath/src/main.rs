//! `nearfaas-fastpath`: the fast path executor's binary. Its logic is the library (src/lib.rs,
//! the command line and start-up in src/executor.rs).

fn main() {
    nearfaas_fastpath::executor::run(nearfaas_fastpath::executor::parse_args())
}
