//! Tests of the scalar functions.
use super::*;

fn ctx() -> EvalCtx<'static> {
    EvalCtx {
        params: &[],
        settings: &|_| None,
        now: 0,
        user: "u",
        database: "d",
        backend_pid: 0,
        subs: vec![],
        outer: vec![],
        seqs: None,
    }
}

fn call(name: &str, args: Vec<Datum>) -> Datum {
    let types: Vec<SqlType> = args
        .iter()
        .map(|d| match d {
            Datum::Int(_) => SqlType::Int4,
            Datum::Numeric(_, s) => SqlType::Numeric { precision: 38, scale: *s },
            Datum::Float(_) => SqlType::Float8,
            Datum::Date(_) => SqlType::Date,
            Datum::Timestamp(_) => SqlType::Timestamp,
            Datum::Null => SqlType::Unknown,
            _ => SqlType::Text,
        })
        .collect();
    let (f, ty, _) = Func::resolve(name, &types).unwrap();
    let exprs: Vec<Expr> = args.into_iter().map(Expr::Const).collect();
    f.eval(&exprs, ty, &[], &ctx()).unwrap()
}

fn t(s: &str) -> Datum {
    Datum::Text(s.into())
}

#[test]
fn string_functions_match_postgres() {
    assert_eq!(call("substring", vec![t("13-456"), Datum::Int(1), Datum::Int(2)]), t("13"));
    assert_eq!(call("substr", vec![t("hello"), Datum::Int(0), Datum::Int(2)]), t("h"));
    assert_eq!(call("substr", vec![t("hello"), Datum::Int(3)]), t("llo"));
    assert_eq!(call("position", vec![t("hello"), t("ll")]), Datum::Int(3));
    assert_eq!(call("replace", vec![t("aXbX"), t("X"), t("-")]), t("a-b-"));
    assert_eq!(call("btrim", vec![t("  x  ")]), t("x"));
    assert_eq!(call("lpad", vec![t("7"), Datum::Int(3), t("0")]), t("007"));
    assert_eq!(call("left", vec![t("abcd"), Datum::Int(-1)]), t("abc"));
    assert_eq!(call("initcap", vec![t("hello wORLD")]), t("Hello World"));
    assert_eq!(call("split_part", vec![t("a,b,c"), t(","), Datum::Int(2)]), t("b"));
    assert_eq!(call("coalesce", vec![Datum::Null, t("z")]), t("z"));
    assert_eq!(call("nullif", vec![Datum::Int(1), Datum::Int(1)]), Datum::Null);
    assert_eq!(call("greatest", vec![Datum::Int(1), Datum::Int(9), Datum::Null]), Datum::Int(9));
}

#[test]
fn numeric_and_date_functions() {
    assert_eq!(call("round", vec![Datum::Numeric(12345, 3), Datum::Int(1)]), Datum::Numeric(12300, 3));
    assert_eq!(call("round", vec![Datum::Float(2.5)]), Datum::Float(3.0));
    assert_eq!(call("trunc", vec![Datum::Numeric(-12345, 3)]), Datum::Numeric(-12000, 3));
    assert_eq!(call("floor", vec![Datum::Numeric(-15, 1)]), Datum::Numeric(-2, 0));
    assert_eq!(call("ceil", vec![Datum::Numeric(15, 1)]), Datum::Numeric(2, 0));
    assert_eq!(call("mod", vec![Datum::Int(7), Datum::Int(3)]), Datum::Int(1));
    let d = Datum::Date(crate::datetime::parse_date("1995-06-17").unwrap());
    assert_eq!(call("extract", vec![t("year"), d.clone()]), Datum::Numeric(1995, 0));
    assert_eq!(call("date_part", vec![t("month"), d.clone()]), Datum::Float(6.0));
    let tr = call("date_trunc", vec![t("quarter"), d]);
    assert_eq!(tr.to_text(SqlType::Timestamp), "1995-04-01 00:00:00");
}
