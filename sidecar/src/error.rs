//! The protocol's error: a Triton error code and a message, mapped to HTTP status codes and gRPC
//! status codes exactly as Triton maps them.

use http::StatusCode;

/// Triton's error codes (`TRITONSERVER_Error_Code`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    Internal,
    NotFound,
    InvalidArg,
    Unavailable,
    Unsupported,
    AlreadyExists,
    Cancelled,
    Unknown,
    /// A request refused for who sent it: Triton's restricted-API answer (HTTP 403, gRPC
    /// `UNAVAILABLE`).
    Restricted,
}

/// A protocol error: its code (HTTP status and gRPC code follow from it) and Triton's message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    pub code: Code,
    pub message: String,
    /// Raised by the model (its backend) once the request was accepted, rather than by the checks
    /// before: Triton's gRPC stream answers such an error as the request's final response, with
    /// the model's name, where it answers a refused request with the error alone.
    pub from_model: bool,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Code {
    /// Triton's name of the code (`TRITONSERVER_ErrorCodeString`).
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Internal => "Internal",
            Code::NotFound => "Not found",
            Code::InvalidArg => "Invalid argument",
            Code::Unavailable => "Unavailable",
            Code::Unsupported => "Unsupported",
            Code::AlreadyExists => "Already exists",
            Code::Cancelled => "Cancelled",
            Code::Unknown => "Unknown",
            Code::Restricted => "Restricted",
        }
    }
}

impl Error {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Error {
            code,
            message: message.into(),
            from_model: false,
        }
    }

    /// The same error, marked as raised by the model (see `from_model`).
    pub fn from_model(self) -> Self {
        Error {
            from_model: true,
            ..self
        }
    }
    pub fn invalid_arg(message: impl Into<String>) -> Self {
        Error::new(Code::InvalidArg, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Error::new(Code::NotFound, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Error::new(Code::Internal, message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Error::new(Code::Unavailable, message)
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        Error::new(Code::Unsupported, message)
    }
    pub fn already_exists(message: impl Into<String>) -> Self {
        Error::new(Code::AlreadyExists, message)
    }
    pub fn restricted(message: impl Into<String>) -> Self {
        Error::new(Code::Restricted, message)
    }

    /// HTTP status as Triton's `HttpCodeFromError` chooses it.
    pub fn http_status(&self) -> StatusCode {
        match self.code {
            Code::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Code::Unsupported => StatusCode::NOT_IMPLEMENTED,
            Code::Restricted => StatusCode::FORBIDDEN,
            Code::InvalidArg | Code::AlreadyExists | Code::Cancelled | Code::Unknown => {
                StatusCode::BAD_REQUEST
            }
        }
    }

    pub fn grpc_code(&self) -> tonic::Code {
        match self.code {
            Code::Internal => tonic::Code::Internal,
            Code::NotFound => tonic::Code::NotFound,
            Code::InvalidArg => tonic::Code::InvalidArgument,
            Code::Unavailable | Code::Restricted => tonic::Code::Unavailable,
            Code::Unsupported => tonic::Code::Unimplemented,
            Code::AlreadyExists => tonic::Code::AlreadyExists,
            Code::Cancelled => tonic::Code::Cancelled,
            Code::Unknown => tonic::Code::Unknown,
        }
    }
}

/// The shared-memory crate's errors (mapping, copying, CUDA) carry the code and message a client
/// sees; both pass unchanged.
impl From<infergate_shm::Error> for Error {
    fn from(err: infergate_shm::Error) -> Self {
        let code = match err.kind {
            infergate_shm::Kind::InvalidArg => Code::InvalidArg,
            infergate_shm::Kind::Internal => Code::Internal,
        };
        Error::new(code, err.message)
    }
}

impl From<Error> for tonic::Status {
    fn from(err: Error) -> Self {
        tonic::Status::new(err.grpc_code(), err.message)
    }
}

/// The prefix Triton's core puts on request-validation messages.
pub fn request_prefix(id: &str) -> String {
    if id.is_empty() {
        "[request id: <id_unknown>] ".to_string()
    } else {
        format!("[request id: {id}] ")
    }
}
