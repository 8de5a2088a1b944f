//! `nearfaas-fastpath-load`: the fast path's UDP load generator. Its logic, flags and output are
//! in the library (src/load/).

fn main() {
    nearfaas_fastpath::load::main()
}
