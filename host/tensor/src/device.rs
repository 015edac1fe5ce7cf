//! The device tensors are stored on.

use candle_core::Device;

/// The device for host tensors: CUDA GPU 0 when built with the `cuda` feature and a GPU is
/// present, otherwise the CPU (with a log line saying why, under the feature).
pub fn default_device() -> Device {
    #[cfg(feature = "cuda")]
    match Device::new_cuda(0) {
        Ok(device) => return device,
        Err(e) => {
            tracing::info!("built with cuda but GPU 0 is not usable ({e}); tensors stay on the CPU")
        }
    }
    Device::Cpu
}

/// Every device tests should run on: the CPU, and GPU 0 when built with `cuda` and present.
pub fn test_devices() -> Vec<Device> {
    let mut devices = vec![Device::Cpu];
    let d = default_device();
    if !d.is_cpu() {
        devices.push(d);
    }
    devices
}
