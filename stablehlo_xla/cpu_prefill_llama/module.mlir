module @capstep_prefill_llama attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<11x8xf32> loc("tok_emb"), %arg1: tensor<8xf32> loc("blocks.0.attn_norm"), %arg2: tensor<8x8xf32> loc("blocks.0.attn.wq"), %arg3: tensor<8x4xf32> loc("blocks.0.attn.wk"), %arg4: tensor<8x4xf32> loc("blocks.0.attn.wv"), %arg5: tensor<8x8xf32> loc("blocks.0.attn.wo"), %arg6: tensor<8xf32> loc("blocks.0.mlp_norm"), %arg7: tensor<8x16xf32> loc("blocks.0.mlp.w_gate"), %arg8: tensor<8x16xf32> loc("blocks.0.mlp.w_up"), %arg9: tensor<16x8xf32> loc("blocks.0.mlp.w_down"), %arg10: tensor<8xf32> loc("final_norm"), %arg11: tensor<8x11xf32> loc("head"), %arg12: tensor<1x5xi32> loc("tokens")) -> (tensor<1x1x11xf32> {jax.result_info = "logits"}, tensor<1x1x5x4xf32> {jax.result_info = "k.0"}, tensor<1x1x5x4xf32> {jax.result_info = "v.0"}) {
    %0 = "stablehlo.gather"(%arg0, %arg12) <{dimension_numbers = #stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 2>, indices_are_sorted = false, slice_sizes = array<i64: 1, 8>}> : (tensor<11x8xf32>, tensor<1x5xi32>) -> tensor<1x5x8xf32>
    %1 = stablehlo.constant dense<"0x0000803F0000803F0000803F0000803F40510A3FB9FC7F3F40510A3FB9FC7F3F3311D5BEE5F27F3F3311D5BEE5F27F3F26707DBF83E27F3F26707DBF83E27F3F305527BF94CB7F3F305527BF94CB7F3F"> : tensor<5x4xf32>
    %2 = stablehlo.constant dense<"0x00000000000000000000000000000000A46A573F57D6233CA46A573F57D6233CB7C7683F3ED4A33CB7C7683F3ED4A33CC381103E1FB9F53CC381103E1FB9F53CCFBD41BFDBCB233DCFBD41BFDBCB233D"> : tensor<5x4xf32>
    %3 = stablehlo.constant dense<[[0.000000e+00, 0.000000e+00, 1.000000e+00, 0.000000e+00], [0.000000e+00, 0.000000e+00, 0.000000e+00, 1.000000e+00], [-1.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00], [0.000000e+00, -1.000000e+00, 0.000000e+00, 0.000000e+00]]> : tensor<4x4xf32>
    %4 = stablehlo.multiply %0, %0 : tensor<1x5x8xf32>
    %init5 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %5 = stablehlo.reduce(%4 init: %init5) applies stablehlo.add across dimensions = [2] : (tensor<1x5x8xf32>, tensor<f32>) -> tensor<1x5xf32>
    %6 = stablehlo.constant dense<1.250000e-01> : tensor<1x5xf32>
    %7 = stablehlo.multiply %5, %6 : tensor<1x5xf32>
    %8 = stablehlo.constant dense<1.000000e-05> : tensor<1x5xf32>
    %9 = stablehlo.add %7, %8 : tensor<1x5xf32>
    %10 = stablehlo.rsqrt %9 : tensor<1x5xf32>
    %11 = stablehlo.broadcast_in_dim %10, dims = [0, 1] : (tensor<1x5xf32>) -> tensor<1x5x8xf32>
    %12 = stablehlo.multiply %0, %11 : tensor<1x5x8xf32>
    %13 = stablehlo.broadcast_in_dim %arg1, dims = [2] : (tensor<8xf32>) -> tensor<1x5x8xf32>
    %14 = stablehlo.multiply %12, %13 : tensor<1x5x8xf32>
    %15 = stablehlo.dot_general %14, %arg4, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x5x8xf32>, tensor<8x4xf32>) -> tensor<1x5x4xf32>
    %16 = stablehlo.reshape %15 : (tensor<1x5x4xf32>) -> tensor<1x5x1x4xf32>
    %17 = stablehlo.transpose %16, dims = [0, 2, 1, 3] : (tensor<1x5x1x4xf32>) -> tensor<1x1x5x4xf32>
    %18 = stablehlo.dot_general %14, %arg3, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x5x8xf32>, tensor<8x4xf32>) -> tensor<1x5x4xf32>
    %19 = stablehlo.reshape %18 : (tensor<1x5x4xf32>) -> tensor<1x5x1x4xf32>
    %20 = stablehlo.transpose %19, dims = [0, 2, 1, 3] : (tensor<1x5x1x4xf32>) -> tensor<1x1x5x4xf32>
    %21 = stablehlo.dot_general %14, %arg2, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x5x8xf32>, tensor<8x8xf32>) -> tensor<1x5x8xf32>
    %22 = stablehlo.reshape %21 : (tensor<1x5x8xf32>) -> tensor<1x5x2x4xf32>
    %23 = stablehlo.transpose %22, dims = [0, 2, 1, 3] : (tensor<1x5x2x4xf32>) -> tensor<1x2x5x4xf32>
    %24 = stablehlo.dot_general %20, %3, contracting_dims = [3] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x5x4xf32>, tensor<4x4xf32>) -> tensor<1x1x5x4xf32>
    %25 = stablehlo.broadcast_in_dim %2, dims = [2, 3] : (tensor<5x4xf32>) -> tensor<1x1x5x4xf32>
    %26 = stablehlo.multiply %24, %25 : tensor<1x1x5x4xf32>
    %27 = stablehlo.broadcast_in_dim %1, dims = [2, 3] : (tensor<5x4xf32>) -> tensor<1x1x5x4xf32>
    %28 = stablehlo.multiply %20, %27 : tensor<1x1x5x4xf32>
    %29 = stablehlo.add %28, %26 : tensor<1x1x5x4xf32>
    %30 = stablehlo.dot_general %23, %3, contracting_dims = [3] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x2x5x4xf32>, tensor<4x4xf32>) -> tensor<1x2x5x4xf32>
    %31 = stablehlo.broadcast_in_dim %2, dims = [2, 3] : (tensor<5x4xf32>) -> tensor<1x2x5x4xf32>
    %32 = stablehlo.multiply %30, %31 : tensor<1x2x5x4xf32>
    %33 = stablehlo.broadcast_in_dim %1, dims = [2, 3] : (tensor<5x4xf32>) -> tensor<1x2x5x4xf32>
    %34 = stablehlo.multiply %23, %33 : tensor<1x2x5x4xf32>
    %35 = stablehlo.add %34, %32 : tensor<1x2x5x4xf32>
    %36 = stablehlo.broadcast_in_dim %17, dims = [0, 1, 3, 4] : (tensor<1x1x5x4xf32>) -> tensor<1x1x2x5x4xf32>
    %37 = stablehlo.reshape %36 : (tensor<1x1x2x5x4xf32>) -> tensor<1x2x5x4xf32>
    %38 = stablehlo.broadcast_in_dim %29, dims = [0, 1, 3, 4] : (tensor<1x1x5x4xf32>) -> tensor<1x1x2x5x4xf32>
    %39 = stablehlo.reshape %38 : (tensor<1x1x2x5x4xf32>) -> tensor<1x2x5x4xf32>
    %40 = stablehlo.dot_general %35, %39, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [3], precision = [DEFAULT, DEFAULT] : (tensor<1x2x5x4xf32>, tensor<1x2x5x4xf32>) -> tensor<1x2x5x5xf32>
    %41 = stablehlo.iota dim = 0 : tensor<5x5xi32>
    %42 = stablehlo.iota dim = 1 : tensor<5x5xi32>
    %43 = stablehlo.compare GT, %42, %41, SIGNED : (tensor<5x5xi32>, tensor<5x5xi32>) -> tensor<5x5xi1>
    %44 = stablehlo.constant dense<0.000000e+00> : tensor<5x5xf32>
    %45 = stablehlo.constant dense<-1.000000e+09> : tensor<5x5xf32>
    %46 = stablehlo.select %43, %45, %44 : tensor<5x5xi1>, tensor<5x5xf32>
    %47 = stablehlo.constant dense<5.000000e-01> : tensor<1x2x5x5xf32>
    %48 = stablehlo.multiply %40, %47 : tensor<1x2x5x5xf32>
    %49 = stablehlo.broadcast_in_dim %46, dims = [2, 3] : (tensor<5x5xf32>) -> tensor<1x2x5x5xf32>
    %50 = stablehlo.add %48, %49 : tensor<1x2x5x5xf32>
    %init51 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %51 = stablehlo.reduce(%50 init: %init51) applies stablehlo.maximum across dimensions = [3] : (tensor<1x2x5x5xf32>, tensor<f32>) -> tensor<1x2x5xf32>
    %52 = stablehlo.broadcast_in_dim %51, dims = [0, 1, 2] : (tensor<1x2x5xf32>) -> tensor<1x2x5x5xf32>
    %53 = stablehlo.subtract %50, %52 : tensor<1x2x5x5xf32>
    %54 = stablehlo.exponential %53 : tensor<1x2x5x5xf32>
    %init55 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %55 = stablehlo.reduce(%54 init: %init55) applies stablehlo.add across dimensions = [3] : (tensor<1x2x5x5xf32>, tensor<f32>) -> tensor<1x2x5xf32>
    %56 = stablehlo.broadcast_in_dim %55, dims = [0, 1, 2] : (tensor<1x2x5xf32>) -> tensor<1x2x5x5xf32>
    %57 = stablehlo.divide %54, %56 : tensor<1x2x5x5xf32>
    %58 = stablehlo.dot_general %57, %37, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2], precision = [DEFAULT, DEFAULT] : (tensor<1x2x5x5xf32>, tensor<1x2x5x4xf32>) -> tensor<1x2x5x4xf32>
    %59 = stablehlo.transpose %58, dims = [0, 2, 1, 3] : (tensor<1x2x5x4xf32>) -> tensor<1x5x2x4xf32>
    %60 = stablehlo.reshape %59 : (tensor<1x5x2x4xf32>) -> tensor<1x5x8xf32>
    %61 = stablehlo.dot_general %60, %arg5, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x5x8xf32>, tensor<8x8xf32>) -> tensor<1x5x8xf32>
    %62 = stablehlo.add %0, %61 : tensor<1x5x8xf32>
    %63 = stablehlo.multiply %62, %62 : tensor<1x5x8xf32>
    %init64 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %64 = stablehlo.reduce(%63 init: %init64) applies stablehlo.add across dimensions = [2] : (tensor<1x5x8xf32>, tensor<f32>) -> tensor<1x5xf32>
    %65 = stablehlo.constant dense<1.250000e-01> : tensor<1x5xf32>
    %66 = stablehlo.multiply %64, %65 : tensor<1x5xf32>
    %67 = stablehlo.constant dense<1.000000e-05> : tensor<1x5xf32>
    %68 = stablehlo.add %66, %67 : tensor<1x5xf32>
    %69 = stablehlo.rsqrt %68 : tensor<1x5xf32>
    %70 = stablehlo.broadcast_in_dim %69, dims = [0, 1] : (tensor<1x5xf32>) -> tensor<1x5x8xf32>
    %71 = stablehlo.multiply %62, %70 : tensor<1x5x8xf32>
    %72 = stablehlo.broadcast_in_dim %arg6, dims = [2] : (tensor<8xf32>) -> tensor<1x5x8xf32>
    %73 = stablehlo.multiply %71, %72 : tensor<1x5x8xf32>
    %74 = stablehlo.dot_general %73, %arg8, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x5x8xf32>, tensor<8x16xf32>) -> tensor<1x5x16xf32>
    %75 = stablehlo.dot_general %73, %arg7, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x5x8xf32>, tensor<8x16xf32>) -> tensor<1x5x16xf32>
    %76 = stablehlo.constant dense<-8.000000e+01> : tensor<1x5x16xf32>
    %77 = stablehlo.maximum %75, %76 : tensor<1x5x16xf32>
    %78 = stablehlo.negate %77 : tensor<1x5x16xf32>
    %79 = stablehlo.exponential %78 : tensor<1x5x16xf32>
    %80 = stablehlo.constant dense<1.000000e+00> : tensor<1x5x16xf32>
    %81 = stablehlo.add %79, %80 : tensor<1x5x16xf32>
    %82 = stablehlo.divide %75, %81 : tensor<1x5x16xf32>
    %83 = stablehlo.multiply %82, %74 : tensor<1x5x16xf32>
    %84 = stablehlo.dot_general %83, %arg9, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x5x16xf32>, tensor<16x8xf32>) -> tensor<1x5x8xf32>
    %85 = stablehlo.add %62, %84 : tensor<1x5x8xf32>
    %86 = stablehlo.slice %85 [0:1, 4:5, 0:8] : (tensor<1x5x8xf32>) -> tensor<1x1x8xf32>
    %87 = stablehlo.multiply %86, %86 : tensor<1x1x8xf32>
    %init88 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %88 = stablehlo.reduce(%87 init: %init88) applies stablehlo.add across dimensions = [2] : (tensor<1x1x8xf32>, tensor<f32>) -> tensor<1x1xf32>
    %89 = stablehlo.constant dense<1.250000e-01> : tensor<1x1xf32>
    %90 = stablehlo.multiply %88, %89 : tensor<1x1xf32>
    %91 = stablehlo.constant dense<1.000000e-05> : tensor<1x1xf32>
    %92 = stablehlo.add %90, %91 : tensor<1x1xf32>
    %93 = stablehlo.rsqrt %92 : tensor<1x1xf32>
    %94 = stablehlo.broadcast_in_dim %93, dims = [0, 1] : (tensor<1x1xf32>) -> tensor<1x1x8xf32>
    %95 = stablehlo.multiply %86, %94 : tensor<1x1x8xf32>
    %96 = stablehlo.broadcast_in_dim %arg10, dims = [2] : (tensor<8xf32>) -> tensor<1x1x8xf32>
    %97 = stablehlo.multiply %95, %96 : tensor<1x1x8xf32>
    %98 = stablehlo.dot_general %97, %arg11, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<1x1x8xf32>, tensor<8x11xf32>) -> tensor<1x1x11xf32>
    return %98, %29, %17 : tensor<1x1x11xf32>, tensor<1x1x5x4xf32>, tensor<1x1x5x4xf32>
  }
}
