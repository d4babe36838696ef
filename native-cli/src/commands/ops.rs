//! `kernels ops`: every op, listed from [`OpKind::ALL`] and [`OpKind::spec`] (never from a list
//! of its own), as text, JSON or the Markdown tables pasted into kernels-core/README.md.

use kernels_core::numerics::Budget;
use kernels_core::op::{AttrDefault, AttrKind, AttrSpec, AttrValue, InputKind, OpSpec};
use kernels_core::{DType, OpKind};
use serde_json::{Value, json};

use crate::{CliResult, emit, emit_json};

fn attr_type(k: &AttrKind) -> String {
    match k {
        AttrKind::Bool => "bool".into(),
        AttrKind::Float => "float".into(),
        AttrKind::Int => "int".into(),
        AttrKind::Choice(c) => c.join("|"),
    }
}

fn attr_value_json(v: &AttrValue) -> Value {
    match v {
        AttrValue::Bool(b) => json!(b),
        AttrValue::Float(x) => json!(x),
        AttrValue::Int(i) => json!(i),
        AttrValue::Str(s) => json!(s),
    }
}

/// `name=default`, `name` (required) or `name=<derived>`.
fn attr_text(a: &AttrSpec) -> String {
    match &a.default {
        AttrDefault::Required => format!("{} (required {})", a.name, attr_type(&a.kind)),
        AttrDefault::Value(v) => format!("{}={v}", a.name),
        AttrDefault::Derived(how) => format!("{}={how}", a.name),
    }
}

fn input_text(spec: &OpSpec) -> Vec<String> {
    spec.inputs
        .iter()
        .map(|i| match i.kind {
            InputKind::Float => i.name.to_string(),
            InputKind::Int => format!("{} (i32/i64)", i.name),
            InputKind::Weight => format!("{} (f32 or weight dtype)", i.name),
        })
        .collect()
}

/// A budget in one line, e.g. `atol 2e-6, rtol 2e-6, x sqrt(K)`, or `exact`.
pub fn budget_text(b: &Budget) -> String {
    if b.is_exact() {
        return "exact".into();
    }
    let num = |x: f64| {
        if x == 0.0 {
            "0".to_string()
        } else {
            format!("{x:e}")
        }
    };
    let mut s = format!("atol {}, rtol {}", num(b.atol), num(b.rtol));
    if b.grows_with_k {
        s.push_str(", x sqrt(K)");
    }
    s
}

fn budget_json(b: &Budget) -> Value {
    json!({"atol": b.atol, "rtol": b.rtol, "grows_with_k": b.grows_with_k})
}

/// One op as a JSON object: `{"name","inputs","attrs","outputs","grad_inputs","budget","doc",
/// "nan"}`.
pub fn op_json(kind: OpKind) -> Value {
    let spec = kind.spec();
    let attrs: Vec<Value> = spec
        .attrs
        .iter()
        .map(|a| {
            let mut o = json!({"name": a.name, "type": attr_type(&a.kind)});
            match &a.default {
                AttrDefault::Required => {
                    o["default"] = Value::Null;
                    o["required"] = json!(true);
                }
                AttrDefault::Value(v) => {
                    o["default"] = attr_value_json(v);
                    o["required"] = json!(false);
                }
                AttrDefault::Derived(how) => {
                    o["default"] = Value::Null;
                    o["required"] = json!(false);
                    o["derived"] = json!(how);
                }
            }
            o
        })
        .collect();
    let inputs: Vec<Value> = spec
        .inputs
        .iter()
        .map(|i| {
            json!({
                "name": i.name,
                "dtype": match i.kind {
                    InputKind::Float => json!(["f32"]),
                    InputKind::Int => json!(["i32", "i64"]),
                    InputKind::Weight => {
                        let mut v = vec!["f32"];
                        v.extend(DType::WEIGHT.iter().map(|d| d.name()));
                        json!(v)
                    }
                },
            })
        })
        .collect();
    let mut budget = budget_json(&spec.budget);
    budget["backward"] = if spec.differentiable() {
        budget_json(&spec.budget_backward)
    } else {
        Value::Null
    };
    json!({
        "name": kind.name(),
        "inputs": inputs,
        "attrs": attrs,
        "outputs": spec.outputs,
        "grad_inputs": spec.grad_inputs,
        "budget": budget,
        "doc": spec.doc,
        "nan": spec.nan,
    })
}

/// Every op as a JSON list.
pub fn all_json() -> Value {
    Value::Array(OpKind::ALL.iter().map(|k| op_json(*k)).collect())
}

/// Human-readable listing.
pub fn text() -> String {
    let mut s = String::new();
    for k in OpKind::ALL {
        let spec = k.spec();
        s.push_str(&format!(
            "{}({}) -> {}\n",
            k.name(),
            input_text(&spec).join(", "),
            spec.outputs.join(", ")
        ));
        s.push_str(&format!("    {}\n", spec.doc));
        if !spec.attrs.is_empty() {
            let a: Vec<String> = spec.attrs.iter().map(attr_text).collect();
            s.push_str(&format!("    attrs:    {}\n", a.join(", ")));
        }
        if spec.differentiable() {
            s.push_str(&format!("    grads:    {}\n", spec.grad_inputs.join(", ")));
        } else {
            s.push_str("    grads:    none (no backward)\n");
        }
        s.push_str(&format!("    forward:  {}\n", budget_text(&spec.budget)));
        if spec.differentiable() {
            s.push_str(&format!(
                "    backward: {}\n",
                budget_text(&spec.budget_backward)
            ));
        }
        s.push_str(&format!("    nan:      {}\n", spec.nan));
    }
    s.push_str(
        "\nBudgets: |got - ref| <= atol + rtol * |ref| against the f32 CPU reference; \
         `x sqrt(K)` scales both by the square root of the reduced length K.\n",
    );
    s
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|")
}

/// The op table and the error budget table, in Markdown.
pub fn markdown() -> String {
    let mut s = String::new();
    s.push_str("| op | inputs | attrs (default) | outputs | gradients for | meaning |\n");
    s.push_str("|---|---|---|---|---|---|\n");
    for k in OpKind::ALL {
        let spec = k.spec();
        let attrs: Vec<String> = spec
            .attrs
            .iter()
            .map(|a| format!("`{}`", md_escape(&attr_text(a))))
            .collect();
        let grads = if spec.differentiable() {
            spec.grad_inputs.join(", ")
        } else {
            "(no backward)".into()
        };
        s.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} |\n",
            k.name(),
            md_escape(&input_text(&spec).join(", ")),
            attrs.join(", "),
            spec.outputs.join(", "),
            grads,
            md_escape(spec.doc),
        ));
    }
    s.push_str(
        "\n| op | forward budget | backward budget | NaN, infinities, out-of-range values |\n\
         |---|---|---|---|\n",
    );
    for k in OpKind::ALL {
        let spec = k.spec();
        let bwd = if spec.differentiable() {
            budget_text(&spec.budget_backward)
        } else {
            "-".into()
        };
        s.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            k.name(),
            budget_text(&spec.budget),
            bwd,
            md_escape(spec.nan)
        ));
    }
    s
}

/// Runs `kernels ops`: the text listing, or with `json` the JSON list, or with `tables` the
/// Markdown tables of kernels-core/README.md.
pub fn run(json: bool, tables: bool) -> CliResult<()> {
    if json {
        emit_json(&all_json())
    } else if tables {
        emit(&markdown())
    } else {
        emit(&text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lists_every_op_with_its_spec() {
        let v = all_json();
        let list = v.as_array().unwrap();
        assert_eq!(list.len(), OpKind::ALL.len());
        for (o, k) in list.iter().zip(OpKind::ALL) {
            assert_eq!(o["name"], k.name());
            let spec = k.spec();
            assert_eq!(o["inputs"].as_array().unwrap().len(), spec.inputs.len());
            assert_eq!(o["attrs"].as_array().unwrap().len(), spec.attrs.len());
            assert_eq!(o["budget"]["atol"].as_f64().unwrap(), spec.budget.atol);
            assert_eq!(o["budget"]["backward"].is_null(), !spec.differentiable());
            assert_eq!(o["nan"], spec.nan);
            assert!(!spec.nan.is_empty(), "{k}: no NaN semantics");
        }
        let scale = &list[OpKind::ALL
            .iter()
            .position(|k| *k == OpKind::Scale)
            .unwrap()];
        assert_eq!(scale["attrs"][0]["required"], true);
        let ln = &list[OpKind::ALL
            .iter()
            .position(|k| *k == OpKind::LayerNorm)
            .unwrap()];
        // Published as declared (1e-5, not the f32 widened), the same value as the constant.
        let eps = ln["attrs"][0]["default"].as_f64().unwrap();
        assert_eq!(eps, 1e-5);
        assert_eq!(eps as f32, kernels_core::op::LAYER_NORM_EPS);
    }

    #[test]
    fn markdown_has_one_row_per_op_in_each_table() {
        let md = markdown();
        for k in OpKind::ALL {
            let needle = format!("| `{}` |", k.name());
            assert_eq!(md.matches(&needle).count(), 2, "{k}");
            let nan = format!("| {} |\n", md_escape(k.spec().nan));
            assert!(md.contains(&nan), "{k}: no NaN column");
        }
        assert!(md.contains("| op | forward budget | backward budget | NaN, infinities"));
    }

    #[test]
    fn budget_text_marks_exact_and_k_scaled() {
        assert_eq!(budget_text(&Budget::EXACT), "exact");
        assert!(budget_text(&Budget::per_k(2e-6, 2e-6)).contains("sqrt(K)"));
        assert!(!budget_text(&Budget::fixed(1e-6, 1e-5)).contains("sqrt"));
    }
}
