// TEMPORARY placeholder until the real module lands.
use super::Pod;
#[derive(Debug)]
pub struct FieldError {
    pub path: String,
    pub value: String,
    pub message: String,
}
impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {:?}", self.path, self.message, self.value)
    }
}
pub fn validate_pod(p: &Pod) -> Vec<FieldError> {
    let mut v = Vec::new();
    for (i, c) in p.spec.containers.iter().enumerate() {
        if c.image.is_empty() {
            v.push(FieldError {
                path: format!("spec.containers[{i}].image"),
                value: String::new(),
                message: "required value".into(),
            });
        }
    }
    v
}
