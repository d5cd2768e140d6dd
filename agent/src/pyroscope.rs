//! Pyroscope's push API (`push.v1.PusherService/Push`, Connect over
//! HTTP/1.1 with a protobuf body): a request of series, each its labels
//! (`__name__`, `service_name`, …) and one raw pprof profile.

use prost::Message;

/// One series of a push: its labels and its profile (gzipped pprof).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Series {
    /// Label names and values; names as Prometheus spells them.
    pub labels: Vec<(String, String)>,
    /// The pprof profile.
    pub pprof: Vec<u8>,
}

/// The encoded `PushRequest`.
pub fn push_request(series: &[Series]) -> Vec<u8> {
    wire::PushRequest {
        series: series
            .iter()
            .map(|s| wire::RawProfileSeries {
                labels: s
                    .labels
                    .iter()
                    .map(|(name, value)| wire::LabelPair {
                        name: name.clone(),
                        value: value.clone(),
                    })
                    .collect(),
                samples: vec![wire::RawSample {
                    raw_profile: s.pprof.clone(),
                    id: String::new(),
                }],
            })
            .collect(),
    }
    .encode_to_vec()
}

/// The messages, with the field numbers of Pyroscope's `push/v1/push.proto`
/// and `types/v1/types.proto`.
pub mod wire {
    #![allow(missing_docs)]

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PushRequest {
        #[prost(message, repeated, tag = "1")]
        pub series: Vec<RawProfileSeries>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RawProfileSeries {
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<LabelPair>,
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<RawSample>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LabelPair {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub value: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RawSample {
        #[prost(bytes = "vec", tag = "1")]
        pub raw_profile: Vec<u8>,
        #[prost(string, tag = "2")]
        pub id: String,
    }
}
