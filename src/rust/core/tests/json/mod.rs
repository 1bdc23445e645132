//! A small JSON reader for the reference files in tests/data (numbers,
//! strings, arrays, objects, null): enough to read them without a
//! dependency.

use std::collections::BTreeMap;
use std::ops::Index;

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Number(f64),
    String(String),
    Array(Vec<Value>),
    Object(BTreeMap<String, Value>),
}

static NULL: Value = Value::Null;

impl Index<&str> for Value {
    type Output = Value;
    fn index(&self, key: &str) -> &Value {
        match self {
            Value::Object(m) => m.get(key).unwrap_or_else(|| panic!("no key {key}")),
            _ => &NULL,
        }
    }
}

impl Value {
    pub fn number(&self) -> f64 {
        match self {
            Value::Number(x) => *x,
            other => panic!("not a number: {other:?}"),
        }
    }
    pub fn numbers(&self) -> Vec<f64> {
        self.array().iter().map(|v| v.number()).collect()
    }
    pub fn array(&self) -> &[Value] {
        match self {
            Value::Array(a) => a,
            other => panic!("not an array: {other:?}"),
        }
    }
    pub fn string(&self) -> &str {
        match self {
            Value::String(s) => s,
            other => panic!("not a string: {other:?}"),
        }
    }
}

pub fn parse(text: &str) -> Value {
    let mut p = Parser { s: text.as_bytes(), i: 0 };
    let v = p.value();
    p.ws();
    assert_eq!(p.i, p.s.len(), "trailing characters in JSON");
    v
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) {
        self.ws();
        assert_eq!(self.s[self.i], c, "expected {} at {}", c as char, self.i);
        self.i += 1;
    }
    fn value(&mut self) -> Value {
        self.ws();
        match self.s[self.i] {
            b'{' => {
                self.i += 1;
                let mut m = BTreeMap::new();
                self.ws();
                if self.s[self.i] == b'}' {
                    self.i += 1;
                    return Value::Object(m);
                }
                loop {
                    self.ws();
                    let Value::String(k) = self.value() else { panic!("object key") };
                    self.eat(b':');
                    m.insert(k, self.value());
                    self.ws();
                    self.i += 1;
                    if self.s[self.i - 1] == b'}' {
                        return Value::Object(m);
                    }
                }
            }
            b'[' => {
                self.i += 1;
                let mut a = Vec::new();
                self.ws();
                if self.s[self.i] == b']' {
                    self.i += 1;
                    return Value::Array(a);
                }
                loop {
                    a.push(self.value());
                    self.ws();
                    self.i += 1;
                    if self.s[self.i - 1] == b']' {
                        return Value::Array(a);
                    }
                }
            }
            b'"' => {
                self.i += 1;
                let start = self.i;
                while self.s[self.i] != b'"' {
                    self.i += if self.s[self.i] == b'\\' { 2 } else { 1 };
                }
                self.i += 1;
                Value::String(String::from_utf8_lossy(&self.s[start..self.i - 1]).into_owned())
            }
            b'n' => self.word("null", Value::Null),
            b't' => self.word("true", Value::Bool(true)),
            b'f' => self.word("false", Value::Bool(false)),
            b'N' => self.word("NaN", Value::Number(f64::NAN)),
            b'I' => self.word("Infinity", Value::Number(f64::INFINITY)),
            _ => {
                let start = self.i;
                while self.i < self.s.len() && matches!(self.s[self.i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E' | b'I' | b'n' | b'f' | b'i' | b't' | b'y') {
                    self.i += 1;
                }
                let t = std::str::from_utf8(&self.s[start..self.i]).unwrap();
                Value::Number(if t == "-Infinity" { f64::NEG_INFINITY } else { t.parse().unwrap_or_else(|_| panic!("bad number {t}")) })
            }
        }
    }
    fn word(&mut self, w: &str, v: Value) -> Value {
        assert!(self.s[self.i..].starts_with(w.as_bytes()), "expected {w}");
        self.i += w.len();
        v
    }
}
