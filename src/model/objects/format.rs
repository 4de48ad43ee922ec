//! Which of the two object formats a graph is, read from its input and outputs alone (the module
//! above says what each is); a graph that fits neither is refused.

use super::Graph;
use crate::preprocess::ObjectLayout;

/// An object detector's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ObjectFormat {
    CenterNet,
    Yolo,
}

impl ObjectFormat {
    /// Whether its input is rows, channels last (CenterNet's), rather than planes (YOLO's).
    pub fn channels_last(self) -> bool {
        self == ObjectFormat::CenterNet
    }
}

/// What a graph's declared shapes say of it.
#[derive(Debug, PartialEq)]
pub(super) struct Read {
    pub format: ObjectFormat,
    /// The output the boxes are read from.
    pub output: usize,
    pub layout: ObjectLayout,
    /// Its classes, where the graph says (CenterNet's class heatmap, YOLO's rows past 4).
    pub classes: Option<usize>,
    /// Its batch dimension, where fixed.
    pub batch: Option<usize>,
}

/// A YOLO's input side when the graph leaves it dynamic: ultralytics' default `imgsz`.
const YOLO_SIDE: i64 = 640;

const NEITHER: &str = "fits neither object format: CenterNet takes rows [1, S, S, 3] and gives an output [1, K, 6]; \
                       YOLO takes planes [N, 3, S, S] and gives one output [N, 4 + classes, anchors]";

pub(super) fn read(graph: &Graph) -> Result<Read, String> {
    let input = graph.input_shape().unwrap_or_default();
    let outputs: Vec<&[i64]> = graph.outputs.iter().map(|(_, shape)| shape.as_deref().unwrap_or_default()).collect();
    let fixed = |dim: i64| (dim > 0).then_some(dim as usize);
    match *input {
        [batch, height, width, 3] if height == width && height > 0 => {
            let Some(output) = outputs.iter().position(|shape| matches!(shape, [_, _, 6])) else {
                return Err(format!("{NEITHER} (its input is CenterNet's, but no output is [1, K, 6])"));
            };
            // The class heatmap, [1, H, W, classes], where the graph gives it out.
            let classes = outputs.iter().find_map(|shape| match shape {
                [_, h, w, classes] if *h > 0 && *w > 0 && *classes > 4 => fixed(*classes),
                _ => None,
            });
            let layout = ObjectLayout::Stretched(height as u32);
            let (format, batch) = (ObjectFormat::CenterNet, fixed(batch));
            Ok(Read { format, output, layout, classes, batch })
        }
        [batch, 3, height, width] if height == width || height < 1 || width < 1 => {
            let [[_, rows, _]] = outputs[..] else {
                return Err(format!("{NEITHER} (its input is YOLO's, but it gives {outputs:?})"));
            };
            let Some(classes) = fixed(rows - 4) else {
                return Err(format!("{NEITHER} (its output has {rows} rows, not 4 + classes)"));
            };
            let side = if height > 0 { height } else { YOLO_SIDE };
            let layout = ObjectLayout::Letterboxed(side as u32);
            let (format, batch) = (ObjectFormat::Yolo, fixed(batch));
            Ok(Read { format, output: 0, layout, classes: Some(classes), batch })
        }
        _ => Err(format!("{NEITHER} (it takes {input:?})")),
    }
}
